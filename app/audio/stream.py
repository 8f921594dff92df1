"""What DeviceSource and DeviceSink share: opening by name, levels, loss and recovery.

A stream runs at the device's own rate (its PortAudio default) and asks for mono; a device
that refuses mono gets its channel count and the callback mixes down. The PortAudio callback
is the subclass's ``_callback``: it only copies between the device and preallocated rings and
counts. The engine side calls :meth:`DeviceStream._check_alive` before every read or write: a
stream that PortAudio finished on its own, or whose callbacks stopped for ``lost_after_s``,
is marked ``stats.lost`` and closed through :func:`~app.audio.devices.close_stream` (PortAudio
19.6 never returns from closing a stream whose sound server died, so the engine thread does
not wait on it, close() waits at most ``CLOSE_WAIT_S`` and a close that does not return is
abandoned and counted in ``stats.abandoned``). The next read or write raises
:class:`~app.audio.devices.DeviceLost` (the conversation's end, one line naming the device and
the fix), as does every later one until :meth:`reopen`. ``lost_after_s`` (0.5 s) without a
callback is a stall: a device block is 20 ms, and the engine checks at every poll of a read.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Self

import numpy as np

from app.audio.devices import (
    AudioError,
    AudioStats,
    DeviceInfo,
    DeviceLost,
    Kind,
    close_stream,
    find_device,
    list_devices,
    lost_line,
    portaudio,
    refresh_devices,
    register_stream,
)
from app.audio.rings import SILENCE_DBFS, peak_dbfs
from app.heap import freeze_heap


class DeviceStream:
    """Base of the device source and sink (see the module doc); subclasses set ``kind``."""

    kind: Kind = "input"

    def __init__(
        self,
        device: str | None,
        host_api: str | None,
        block_s: float,
        latency: str | float,
        lost_after_s: float,
    ) -> None:
        if block_s <= 0:
            raise ValueError(f"block_s {block_s}: give a positive block length in seconds")
        self.device = device
        self.host_api = host_api
        self.block_s = block_s
        self.latency = latency
        self.lost_after_s = lost_after_s
        self.stats = AudioStats()
        self.info: DeviceInfo | None = None
        self._stream: Any = None
        self._closed = False
        self._finished = False  # PortAudio finished the current stream on its own
        # Bumped whenever the current stream changes: a stream left behind (closing, lost)
        # may still call back, and must then touch nothing of ours but its own buffer.
        self._generation = 0
        # Serializes start/close/reopen (a UI thread) against reads and writes (the engine).
        self._lock = threading.RLock()
        self._seen_blocks = 0  # watchdog, engine side: callbacks counted at the last check
        self._seen_at = 0.0
        self._last = np.zeros(1, dtype=np.float32)  # the last block, for the level meter
        self._last_n = 0

    # -- subclass hooks -------------------------------------------------------------------
    def _prepare(self, rate: float, block: int) -> None:
        """Allocate rings and resamplers for a stream at ``rate`` with ``block``-sample blocks."""
        raise NotImplementedError

    def _callback(self, data: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        raise NotImplementedError

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Open the device and start the stream; AudioError naming the fix when it cannot."""
        with self._lock:
            if self._stream is not None:
                return
            self._closed = False
            freeze_heap()  # a later full collection would hold the GIL past the buffer
            info = self._find()
            rate = info.default_rate
            block = max(1, round(rate * self.block_s))
            channels = self._channels(info, rate)
            self._generation += 1  # before the buffers change under any stream left behind
            self._prepare(rate, block)
            self._last = np.zeros(4 * block, dtype=np.float32)
            self._last_n = 0
            self._open(info, rate, block, channels)

    def _find(self) -> DeviceInfo:
        try:
            return find_device(self.device, self.kind, self.host_api)
        except AudioError:
            # PortAudio enumerates once: the device may have appeared since. Look again.
            if not refresh_devices():
                raise
            return find_device(self.device, self.kind, self.host_api)

    def _channels(self, info: DeviceInfo, rate: float) -> int:
        sd = portaudio()
        check = sd.check_input_settings if self.kind == "input" else sd.check_output_settings
        try:
            check(device=info.index, channels=1, samplerate=rate, dtype="float32")
            return 1
        except Exception:  # the device refuses mono: open its own count and mix in the callback
            return max(1, min(2, info.channels(self.kind)))

    def _open(self, info: DeviceInfo, rate: float, block: int, channels: int) -> None:
        sd = portaudio()
        cls = sd.InputStream if self.kind == "input" else sd.OutputStream
        self._finished = False
        generation = self._generation

        def callback(data: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
            if generation == self._generation:
                self._callback(data, frames, time_info, status)
            elif self.kind == "output":
                data.fill(0)

        def finished() -> None:  # PortAudio's thread: only set a flag
            if generation == self._generation:
                self._finished = True

        stream = None
        try:
            stream = cls(
                device=info.index,
                samplerate=rate,
                channels=channels,
                dtype="float32",
                blocksize=block,
                latency=self.latency,
                callback=callback,
                finished_callback=finished,
            )
            register_stream(stream)
            stream.start()
        except sd.PortAudioError as exc:
            if stream is not None:  # opened but not started: PortAudio would keep it open
                close_stream(stream, self._what(info), self._abandoned).join()
            others = ", ".join(d.describe() for d in list_devices() if d.channels(self.kind) > 0)
            raise AudioError(
                f"cannot open the {self.kind} device {info.describe()}: {exc}. Close the program "
                f"holding it, or choose another with --{self.kind}-device NAME "
                f"(available: {others})"
            ) from exc
        self._stream, self.info = stream, info
        self.stats.device, self.stats.host_api, self.stats.rate = info.name, info.host_api, rate
        self.stats.latency_s = float(stream.latency)
        self.stats.lost = False
        self._seen_blocks, self._seen_at = self.stats.blocks, time.monotonic()

    def close(self, wait: bool = True) -> None:
        """Stop and close the stream; idempotent. Reads return None afterwards. ``wait=False``:
        do not wait for PortAudio (another device of the conversation was lost: this one's
        server may be gone too, and its close would take ``CLOSE_WAIT_S`` to be abandoned)."""
        with self._lock:
            self._closed = True
            stream = self._leave_stream()
            if stream is not None:  # waits at most CLOSE_WAIT_S: closing hangs when the server died
                watchdog = close_stream(stream, self._what(self.info), self._abandoned)
                if wait:
                    watchdog.join()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def reopen(self) -> None:
        """Close, look the device up again, restart (after ``stats.lost``); AudioError if gone."""
        with self._lock:
            self.close()
            refresh_devices()  # only does something when none of our streams is still open
            self.start()

    def _leave_stream(self) -> Any:
        """Detach the current stream (its callbacks go inert); returns it for closing."""
        stream, self._stream = self._stream, None
        self._generation += 1
        return stream

    def _check_alive(self) -> None:
        """Engine side: mark the stream lost when PortAudio finished it or callbacks stopped."""
        if self._stream is None or self.stats.lost:
            return
        now = time.monotonic()
        if self.stats.blocks != self._seen_blocks:
            self._seen_blocks, self._seen_at = self.stats.blocks, now
        stalled = now - self._seen_at > self.lost_after_s
        if stalled:  # or a thread held the GIL that long: callbacks waiting for it run now
            time.sleep(2 * self.block_s)
            if self.stats.blocks != self._seen_blocks:
                self._seen_blocks, self._seen_at, stalled = (
                    self.stats.blocks,
                    time.monotonic(),
                    False,
                )
        if self._finished or stalled:
            self._mark_lost()

    def _mark_lost(self) -> None:
        self.stats.lost = True
        close_stream(self._leave_stream(), self._what(self.info), self._abandoned)  # no wait

    def _raise_lost(self) -> None:
        """Engine side, after :meth:`_check_alive`: a lost device ends the conversation."""
        if self.stats.lost:
            info = self.info
            raise DeviceLost(lost_line(self.kind, info.describe() if info else repr(self.device)))

    def _what(self, info: DeviceInfo | None) -> str:
        return f"{self.kind} device {info.describe() if info else self.device}"

    def _abandoned(self) -> None:  # the close watchdog's thread: only count
        self.stats.abandoned += 1

    # -- levels ---------------------------------------------------------------------------
    @property
    def level(self) -> float:
        """Peak dBFS of the last device block (-120 when silent, closed or lost). Any thread."""
        if self._stream is None or self._last_n == 0:
            return SILENCE_DBFS
        return peak_dbfs(self._last[: self._last_n])

    def _keep_level(self, block: np.ndarray) -> None:
        """Callback side: copy the block for :attr:`level`."""
        n = min(len(block), len(self._last))
        self._last[:n] = block[:n]
        self._last_n = n

"""DeviceSink: the speaker as a PeriodSink (``app.periods``) fed at the synthesizer's rate.

``write`` runs on the engine thread: one stateful ``soxr.ResampleStream`` converts from
``rate`` (24 kHz) to the device's own rate and queues the result in the jitter buffer
(:mod:`app.audio.jitter`: prebuffer, fade-out instead of a click when dry, counted). The
output callback only copies the next block out of it (and, when echo cancellation is on, into
a far-end ring for the canceller) and counts underflows.

Silence is not let pile up. A period the engine wrote late (a busy host) has the buffer run
dry; the periods it then catches up on arrive in a burst and stay queued, every later sample
playing that much later for the rest of the session (seen: 0.8-1.0 s in all, on a loaded
2-core machine), which delays answers and moves the assistant's echo past what the basic
voice expects. So a write that is all zeros is dropped while the buffer already holds the
prebuffer and that write's length again (counted in ``trimmed``): the queue shrinks back in
the pauses, and no sound is ever dropped.

When each written sample reaches the DAC: the callback marks every block it plays with
PortAudio's ``outputBufferDacTime`` (:mod:`app.audio.marks`), and :meth:`dac_time` turns a
sample's :attr:`position` into that time once it has played (the response latency's end).
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any

import numpy as np
import soxr

from app.audio.devices import AudioError
from app.audio.jitter import JitterBuffer
from app.audio.marks import Marks
from app.audio.rings import Ring
from app.audio.stream import DeviceStream


class DeviceSink(DeviceStream):
    """Speaker output of PCM at ``rate`` (default 24 kHz); see the module doc.

    ``prebuffer_s`` of audio is queued before playback (re)starts; ``buffer_s`` is the most that
    can wait (writes beyond it are dropped and counted as overflows); ``fade_s`` is the fade out
    when the buffer runs dry and the fade in when playback resumes. For ``settle_s`` of device
    time from the first sample written, underflows and dry spells are not counted: the first
    periods come late by nature (the stream primes, the model's first step is its slowest), and
    a dropout shown a second after Start is no dropout of the conversation.
    """

    kind = "output"

    def __init__(
        self,
        device: str | None = None,
        rate: int = 24000,
        host_api: str | None = None,
        prebuffer_s: float = 0.1,
        *,
        block_s: float = 0.02,
        buffer_s: float = 10.0,
        fade_s: float = 0.005,
        latency: str | float = 0.1,  # PortAudio buffer (s): room for a busy host; a period is 1 s
        lost_after_s: float = 0.5,
        settle_s: float = 2.0,
    ) -> None:
        super().__init__(device, host_api, block_s, latency, lost_after_s)
        self.settle_s = settle_s
        self._settle = (
            0  # device samples of the start-up period left (counted from the first write)
        )
        self._dry_base = 0  # dry spells of the start-up period, not counted
        if not 0 <= prebuffer_s < buffer_s:
            raise ValueError(f"prebuffer_s {prebuffer_s}: give 0 <= prebuffer_s < {buffer_s}")
        self.in_rate = rate
        self.prebuffer_s, self.buffer_s, self.fade_s = prebuffer_s, buffer_s, fade_s
        self.dropped = 0  # samples written while lost or closed (nowhere to play them)
        self.trimmed = 0  # silent samples not queued: the buffer held enough (module doc)
        self._jitter = JitterBuffer(2, 0, 1)
        self._block = np.zeros(1, dtype=np.float32)
        self._resampler: soxr.ResampleStream | None = None
        self._tap: Ring | None = None  # far-end reference for echo cancellation, device rate
        self._tap_marks = Marks(1)  # the tap's blocks: (tap index, DAC time, frames)
        self._played = Marks(1)  # the callback's: (buffer index, DAC time, samples) per block
        self._dac: deque[tuple[float, float, float]] = deque(maxlen=1)  # the engine's copy
        # Where written samples went: (position, buffer index or NaN if not queued, count)
        self._writes: deque[tuple[int, float, int]] = deque(maxlen=256)
        self.position = 0  # samples (at ``rate``) ever given to write: the next one's position
        self._origin = 0.0  # buffer index where the resampler's output began
        self._fed = 0  # samples the resampler took since then

    def _prepare(self, rate: float, block: int) -> None:
        self._jitter = JitterBuffer(
            capacity=max(4 * block, round(self.buffer_s * rate)),
            prebuffer=round(self.prebuffer_s * rate),
            fade=max(1, round(self.fade_s * rate)),
        )
        self._block = np.zeros(4 * block, dtype=np.float32)
        self._settle, self._dry_base = round(self.settle_s * rate), 0
        blocks = 2 * round(self.buffer_s * rate) // block + 8  # more than the buffer holds
        self._played, self._dac = Marks(blocks), deque(maxlen=blocks)
        self._writes.clear()
        self._origin, self._fed = 0.0, 0
        same = round(rate) == self.in_rate
        self._resampler = None if same else soxr.ResampleStream(self.in_rate, rate, 1, "float32")

    def _callback(self, outdata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        stats = self.stats
        stats.blocks += 1
        settling = self._settle > 0
        if status.output_underflow and not settling:
            stats.underflows += 1
        if frames > len(self._block):  # larger block than asked for: rare enough to allocate
            self._block = np.zeros(frames, dtype=np.float32)
        block = self._block[:frames]
        played = self._jitter.pull(block)
        dac = time_info.outputBufferDacTime  # 0.0: this host gives no times
        if dac and played:
            self._played.put(self._jitter.ring.consumed - played, dac, played)
        stats.timestamps = stats.timestamps or bool(dac)
        if settling:
            self._dry_base = self._jitter.dry_events
            if self._jitter.ring.written:  # the start-up period runs from the first write
                self._settle -= frames
        stats.dry_events = self._jitter.dry_events - self._dry_base
        outdata[:] = block[:, np.newaxis]  # the same signal on every channel
        tap = self._tap
        if tap is not None:
            if dac:
                self._tap_marks.put(tap.written, dac, frames)
            tap.write(block)  # a full tap drops: the canceller is only behind, never blocks us
        self._keep_level(block)

    def write(self, pcm: np.ndarray) -> None:
        """Queue ``pcm`` (float32 mono at ``rate``, shape (n,) or (1, n)). Engine thread.

        Never blocks. A lost device raises :class:`~app.audio.devices.DeviceLost` (the samples
        are dropped, counted in ``dropped``); on a closed one they are only dropped.
        """
        samples = np.ascontiguousarray(pcm, dtype=np.float32).reshape(-1)
        with self._lock:
            if self._stream is None and not self.stats.lost and not self._closed:
                raise AudioError("DeviceSink.write before start(): call start() first")
            self._check_alive()
            self._take_played()
            position, self.position = self.position, self.position + len(samples)
            if self._stream is None:
                self.dropped += len(samples)
                self._writes.append((position, math.nan, len(samples)))
                self._raise_lost()
                return
            if self._enough_queued(samples):
                self.trimmed += len(samples)
                self._writes.append((position, math.nan, len(samples)))
                return
            index = self._origin + self._fed * self._device_per_sample
            self._writes.append((position, index, len(samples)))
            resampler = self._resampler
            converted = samples if resampler is None else resampler.resample_chunk(samples)
            self._fed += len(samples)
            lost = self._jitter.push(converted)
            if lost > 0:
                self.stats.overflows += 1
                self._origin -= lost  # the samples after these land that much earlier

    @property
    def _device_per_sample(self) -> float:
        return (self.stats.rate or float(self.in_rate)) / self.in_rate

    def _take_played(self) -> None:
        """Move the callback's DAC marks to the engine's copy (engine thread, every write)."""
        index, dac, count = self._played.take()
        self._dac.extend(zip(index.tolist(), dac.tolist(), count.tolist(), strict=True))

    def dac_time(self, position: int) -> float | None:
        """When the sample written at ``position`` (:attr:`position` before its write, plus its
        place in it) reached the DAC, on PortAudio's clock: None while it still waits; NaN when
        it never plays or its time is unknown (trimmed, dropped, flushed by a barge-in, too old,
        or a host without times). Engine thread."""
        with self._lock:
            self._take_played()
            write = next((w for w in reversed(self._writes) if w[0] <= position), None)
            if write is None or position >= write[0] + write[2] or math.isnan(write[1]):
                return math.nan
            index = write[1] + (position - write[0]) * self._device_per_sample
            rate = self.stats.rate or 1.0
            for start, dac, count in reversed(self._dac):
                if start <= index < start + count:
                    return dac + (index - start) / rate
                if start + count <= index:
                    break  # played past it without playing it: flushed
            else:
                return math.nan if self._dac else None
            played = self._dac[-1][0] + self._dac[-1][2]
            return None if index >= played else math.nan

    def _enough_queued(self, samples: np.ndarray) -> bool:
        """Whether ``samples`` are silence and the buffer holds the prebuffer and as much again."""
        rate = self.stats.rate or float(self.in_rate)
        need = self._jitter.prebuffer + len(samples) * rate / self.in_rate
        return self._jitter.ring.available >= need and not samples.any()

    def drain(self, timeout: float = 5.0) -> bool:
        """Play out what is queued, the resampler's tail included, waiting up to ``timeout`` s
        (before close() at the end of a session); True when everything was played."""
        with self._lock:
            if self._stream is None:
                return False
            if self._resampler is not None:
                self._jitter.push(self._resampler.resample_chunk(np.zeros(0, np.float32), True))
                self._resampler.clear()  # ready for more writes after the flush
                self._origin, self._fed = float(self._jitter.ring.written), 0
        deadline = time.monotonic() + timeout
        while self._jitter.ring.available > 0 and time.monotonic() < deadline:
            with self._lock:
                self._check_alive()
                if self._stream is None:
                    return False
            time.sleep(self.block_s)
        return self._jitter.ring.available == 0

    def interrupt(self) -> None:
        """Drop the queued audio, fading out (barge-in: the user spoke over it). Any thread."""
        self._jitter.request_flush()

    @property
    def queued_s(self) -> float:
        """Seconds of audio waiting to be played (the output latency we add). Any thread."""
        rate = self.stats.rate or 1.0
        return self._jitter.ring.available / rate

    @property
    def ahead_s(self) -> float:
        """Seconds until a sample written now is played (reaches the converter): what is queued
        before it, the prebuffer while playback waits to start, and the device's latency as
        PortAudio reports it. Any thread."""
        wait = 0.0 if self._jitter.playing else self.prebuffer_s
        return self.queued_s + wait + self.stats.latency_s

    @property
    def playing(self) -> bool:
        """Whether the jitter buffer is playing (not priming, idle or dry). Any thread."""
        return self._jitter.playing

    def echo_reference(self) -> tuple[Ring, Marks]:
        """The ring the callback copies every played block into (device rate) and its blocks'
        DAC times, created once."""
        if self._tap is None:
            rate = self.stats.rate or 48000
            self._tap_marks = Marks(round(4.0 * rate) // max(1, len(self._block) // 4) + 8)
            self._tap = Ring(max(1, round(2.0 * rate)))
        return self._tap, self._tap_marks

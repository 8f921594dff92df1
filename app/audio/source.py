"""DeviceSource: the microphone as a PeriodSource (``app.periods``) at the model's input rate.

The input stream runs at the device's own rate; its callback copies each block (mixed to mono)
into a preallocated ring and counts overflows, nothing else. ``read_period`` runs on the engine
thread: it drains the ring through one stateful ``soxr.ResampleStream`` (per-chunk resampling
would leave artifacts at every chunk edge) into a FIFO at ``rate`` and returns exactly
``samples`` float32 mono samples. Push-to-talk (half duplex) gates with :meth:`mute`: the
stream keeps running so the period clock stays real time, and muted periods are zeros.

Each block's ADC time (PortAudio's ``inputBufferAdcTime``) goes with it as a mark
(:mod:`app.audio.marks`); ``read_period`` leaves the period's :attr:`timeline` (when each of its
blocks was captured: None where the host gives no times), which the echo canceller and the
response latency read.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import soxr

from app.audio.devices import AudioError
from app.audio.echo import EchoCanceller
from app.audio.marks import Marks, Timeline, time_at
from app.audio.rings import Ring
from app.audio.sink import DeviceSink
from app.audio.stream import DeviceStream

if TYPE_CHECKING:
    from app.periods import PeriodSink, PeriodSource


class DeviceSource(DeviceStream):
    """Microphone periods at ``rate`` (default 16 kHz); see the module doc.

    ``ring_s`` seconds of device audio may wait for the engine before blocks are dropped (and
    counted as overflows); ``lost_after_s`` without a callback marks the device lost.
    """

    kind = "input"

    def __init__(
        self,
        device: str | None = None,
        rate: int = 16000,
        host_api: str | None = None,
        block_s: float = 0.02,
        *,
        ring_s: float = 10.0,
        latency: str | float = 0.1,  # PortAudio buffer (s): room for a busy host; a period is 1 s
        lost_after_s: float = 0.5,
    ) -> None:
        super().__init__(device, host_api, block_s, latency, lost_after_s)
        self.out_rate = rate
        self.ring_s = ring_s
        self._ring = Ring(1)
        self._pending = Ring(max(1, round(ring_s * rate)))
        self._scratch = np.zeros(1, dtype=np.float32)
        self._mix = np.zeros(1, dtype=np.float32)
        self._resampler: soxr.ResampleStream | None = None
        self._muted = False
        self._echo: EchoCanceller | None = None
        self._marks = Marks(1)  # the callback's: each block's (ring index, ADC time, frames)
        self._ratio = 1.0  # model samples per device sample
        self._shift = 0  # model samples the FIFO dropped (full): later ones sit that much earlier
        self._times = np.zeros((2, 0))  # the engine's marks: FIFO index and ADC time, by index
        self.timeline: Timeline | None = None  # the last period's, from read_period

    def _prepare(self, rate: float, block: int) -> None:
        capacity = max(4 * block, round(self.ring_s * rate))
        self._ring = Ring(capacity)
        self._marks = Marks(2 * capacity // block + 8)  # more than the ring's blocks: never full
        self._ratio, self._shift = self.out_rate / rate, 0
        self._times, self.timeline = np.zeros((2, 0)), None
        self._scratch = np.zeros(capacity, dtype=np.float32)
        self._mix = np.zeros(4 * block, dtype=np.float32)
        self._pending.reset()
        same = round(rate) == self.out_rate
        self._resampler = None if same else soxr.ResampleStream(rate, self.out_rate, 1, "float32")

    def _callback(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        stats = self.stats
        stats.blocks += 1
        if status.input_overflow:
            stats.overflows += 1
        if status.input_underflow:
            stats.underflows += 1
        if indata.shape[1] == 1:
            mono = indata[:, 0]
        elif frames <= len(self._mix):
            mono = np.mean(indata, axis=1, out=self._mix[:frames])
        else:  # larger block than asked for: rare enough to allocate
            mono = indata.mean(axis=1)
        adc = time_info.inputBufferAdcTime
        if adc:  # 0.0: this host gives no times
            self._marks.put(self._ring.written, adc, frames)
            stats.timestamps = True
        if self._ring.write(mono) < frames:
            stats.overflows += 1  # the engine fell ring_s behind: this block is lost
        self._keep_level(mono)

    # -- half duplex ----------------------------------------------------------------------
    def mute(self, muted: bool) -> None:
        """Push-to-talk gating: muted periods are zeros (the stream keeps time). Any thread."""
        self._muted = muted

    @property
    def muted(self) -> bool:
        return self._muted

    # -- echo cancellation ----------------------------------------------------------------
    def enable_echo_cancel(self, sink: DeviceSink, delay_ms: int | None = None) -> None:
        """Cancel ``sink``'s playback from this microphone (WebRTC AEC3, pywebrtc-audio).

        Both streams must be started. AudioError naming ``pip install pywebrtc-audio`` when the
        package is absent. Call again after reopening either device.
        """
        if self.stats.rate == 0 or sink.stats.rate == 0:
            raise AudioError("enable_echo_cancel: start() the source and the sink first")
        if delay_ms is None:  # PortAudio's estimate of the echo path: output + input latency
            delay_ms = round(1000 * (sink.stats.latency_s + self.stats.latency_s))
        tap, marks = sink.echo_reference()
        self._echo = EchoCanceller(tap, sink.stats.rate, self.out_rate, delay_ms, far_marks=marks)

    def disable_echo_cancel(self) -> None:
        self._echo = None

    # -- the engine side ------------------------------------------------------------------
    def read_period(self, samples: int, timeout: float | None = None) -> np.ndarray | None:
        """Exactly ``samples`` float32 mono samples at ``rate``; None once closed.

        Blocks until the device delivered them. After ``timeout`` seconds it returns what it
        has, padded with zeros (counted in ``stats.stalls``). A lost device raises
        :class:`~app.audio.devices.DeviceLost` (within ``lost_after_s``); see :meth:`reopen`.
        """
        if self._stream is None and not self.stats.lost and not self._closed:
            raise AudioError("DeviceSource.read_period before start(): call start() first")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._closed:
                    return None
                self._check_alive()
                self._raise_lost()
                self._drain()
                if self._pending.available >= samples:
                    return self._take(samples)
                if deadline is not None and time.monotonic() >= deadline:
                    self.stats.stalls += 1
                    return self._take(samples)
            time.sleep(self.block_s / 2)  # about two polls per device block

    def _take(self, samples: int) -> np.ndarray:
        """The next period from the FIFO, zero-padded when short; muting and echo applied."""
        out = np.zeros(samples, dtype=np.float32)
        start = self._pending.consumed
        self.timeline = self._timeline(start, self._pending.read_into(out))
        if self._echo is not None:  # also while muted: the canceller keeps adapting
            backlog = round(self.queued_s * self.out_rate)
            out = self._echo.process(out, backlog=backlog, times=self.timeline)
        if self._muted:
            out[:] = 0.0
        return out

    def _drain(self) -> None:
        """Move everything the callback queued through the resampler into the FIFO."""
        self._take_marks()
        n = self._ring.read_into(self._scratch)
        if n == 0:
            return
        block = self._scratch[:n]
        converted = block if self._resampler is None else self._resampler.resample_chunk(block)
        took = self._pending.write(converted)
        if took < len(converted):
            self.stats.overflows += 1
            self._shift += len(converted) - took

    def _take_marks(self) -> None:
        """The callback's new marks, moved to FIFO positions (the resampler keeps time: its
        output sample k is the input's instant k / out_rate)."""
        index, adc, _ = self._marks.take()
        if index.size:
            fifo = index * self._ratio - self._shift
            self._times = np.concatenate([self._times, np.stack([fifo, adc])], axis=1)

    def _timeline(self, start: int, n: int) -> Timeline | None:
        """When the FIFO's samples ``start`` .. ``start + n`` were captured (None: no times);
        marks the next period no longer needs are dropped."""
        index, adc = self._times
        if not index.size:
            return None
        inside = (index > start) & (index < start + n)
        offsets = np.concatenate([[0.0], index[inside] - start])
        times = np.concatenate([[time_at(start, index, adc, self.out_rate)], adc[inside]])
        keep = max(0, int(np.searchsorted(index, start + n, side="right")) - 1)
        self._times = self._times[:, keep:]
        return Timeline(offsets, times, float(self.out_rate))

    @property
    def captured_ago_s(self) -> float:
        """Seconds since the last sample :meth:`read_period` handed out was captured (at the
        converter): what was captured after it and still waits, and the device's latency as
        PortAudio reports it. Read right after ``read_period``. Any thread."""
        return self.queued_s + self.stats.latency_s

    @property
    def queued_s(self) -> float:
        """Seconds of microphone audio waiting for the engine (its input latency). Any thread."""
        rate = self.stats.rate or 1.0
        return self._ring.available / rate + self._pending.available / self.out_rate


def cancel_playback_echo(source: PeriodSource, sink: PeriodSink) -> bool:
    """Cancel ``sink``'s playback from ``source`` when both are devices; whether it did.

    A file on either end has no acoustic path between them, so there is nothing to cancel.
    Both devices must be started; AudioError naming the fix when pywebrtc-audio is absent.
    """
    if not (isinstance(source, DeviceSource) and isinstance(sink, DeviceSink)):
        return False
    source.enable_echo_cancel(sink)
    return True

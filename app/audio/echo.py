"""Optional acoustic echo cancellation: the assistant must not hear itself on the speakers.

WebRTC's AEC3 through ``pywebrtc-audio`` (``EchoCanceller(sample_rate, num_channels,
stream_delay_ms).process(near, far)``, float32 in and out, 10 ms frames inside). The near end
is the microphone at the model rate; the far end is what the sink's callback actually played
(its tap ring, device rate), resampled with a stateful soxr stream to the same rate.

Alignment by time. The sink's callback marks each block it copies into the tap with its DAC
time and the source's each microphone block with its ADC time (:mod:`app.audio.marks`); the
far end fed beside a near sample is what was at the DAC when that sample hit the ADC, minus
nothing else (AEC3 finds the echo path past that itself: on the project's PipeWire device the
echo comes back at that very instant, within a sample). Far and near are still tied by their
sample counters, far index = near index + offset, but the offset is the one the times give, at
each near block: it stays put while the times agree with it within ``TIME_TOLERANCE_S`` (timing
noise moves nothing) and follows a larger jump at once (counted in ``gaps``): that is an xrun, a
lost or late block on either side, which shifts the samples after it against their times, so
the echo stays lined up through it.

Without times (a host that gives 0.0, a plain ring as the far end, a far end on another clock
than the near end's), alignment falls back to queue positions, said once in the log: the first
period sets the offset so that the near block's last sample meets what played ``margin`` before
it was captured (``backlog`` tells how long ago that was), with ``margin`` half the echo path
PortAudio reports, so the far end leads the echo by about the other half. That offset is kept
while the measured ideal stays within ``tolerance_s`` of it; only a larger jump (two device
clocks drifting apart, a tap that overflowed) re-anchors it, counted in ``realigned``. Runs on
the engine thread, inside ``read_period``.

Rates. AEC3 takes 16, 32 or 48 kHz only (:data:`AEC_RATES`); a model that hears another rate
(Moshi: 24 kHz) is cancelled at the next rate up (:func:`canceller_rate`): the near end goes up
and back down through stateful soxr streams, and so does the far end. The way back comes in
soxr's bursts: a period that finds it short is padded with zeros at its start, once, which
delays the near end by that much for the rest of the stream (counted in ``padded``).
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

import numpy as np
import soxr

from app.audio.devices import AudioError
from app.audio.marks import Marks, Timeline, time_at
from app.audio.rings import Ring

AEC_RATES = (16000, 32000, 48000)  # the rates WebRTC's AEC3 accepts
TIME_TOLERANCE_S = 0.004  # AEC3's block (64 samples at 16 kHz): a smaller jump is timing noise
CLOCK_DOUBT_S = 1.0  # times further than this from the queues' estimate: not one clock
UNTIMED_AFTER_S = 0.25  # the speaker played this long without a DAC time: its host gives none

log = logging.getLogger("duplexcadence.audio")

INSTALL_HINT = (
    "echo cancellation needs the package pywebrtc-audio: pip install pywebrtc-audio==0.2.0 "
    "(or turn echo cancellation off)"
)

# What the window says where a new user meets speakers (the first-run banner, Help).
HEADPHONES_HINT = (
    "On speakers the assistant could hear itself: echo cancellation is on to stop that. "
    "Headphones work best; with speakers keep the volume moderate, and to interrupt the "
    "assistant speak up clearly over it."
)


def _webrtc() -> ModuleType:
    try:
        return importlib.import_module("pywebrtc_audio")
    except ImportError as exc:
        raise AudioError(f"{INSTALL_HINT} ({exc})") from exc


def check_echo_cancel() -> None:
    """AudioError naming the fix unless a canceller can run here (before any model loads): the
    package imports and AEC3 starts at each rate it takes (others are resampled to those)."""
    module = _webrtc()
    for rate in AEC_RATES:
        try:
            module.EchoCanceller(sample_rate=rate, num_channels=1, stream_delay_ms=0)
        except Exception as exc:  # a broken build: say so before a model loads, not after
            raise AudioError(
                f"echo cancellation does not start at {rate} Hz ({exc}): "
                f"reinstall pywebrtc-audio, or turn echo cancellation off"
            ) from exc


def echo_available() -> bool:
    """Whether echo cancellation can be turned on here (pywebrtc-audio is importable)."""
    try:
        _webrtc()
    except AudioError:
        return False
    return True


def canceller_rate(rate: int) -> int:
    """The rate AEC3 runs at for a stream at ``rate``: ``rate`` itself when AEC3 takes it, else
    the next one up (the highest above 48 kHz)."""
    return next((r for r in AEC_RATES if r >= rate), AEC_RATES[-1])


def _resampler(a: float, b: int) -> soxr.ResampleStream | None:
    return None if round(a) == b else soxr.ResampleStream(a, b, 1, "float32")


class EchoCanceller:
    """AEC3 on microphone periods with the sink's played audio as the far end (module doc).

    ``far``: the tap the sink's callback copies every played block into (``far_rate``);
    ``far_marks``: its DAC-time marks (None: alignment by queue position only).
    """

    def __init__(
        self,
        far: Ring,
        far_rate: float,
        rate: int = 16000,
        delay_ms: int = 0,
        tolerance_s: float = 0.1,
        far_marks: Marks | None = None,
    ) -> None:
        module = _webrtc()
        self.rate = rate
        self.aec_rate = aec = canceller_rate(rate)
        path = max(0, int(delay_ms))  # echo path: output + input latency, in ms
        self._margin = round(path / 2 * aec / 1000)
        self._tolerance = round(tolerance_s * aec)
        self._aec = module.EchoCanceller(
            sample_rate=aec, num_channels=1, stream_delay_ms=path - path // 2
        )
        self._far_marks = far_marks
        if far_marks is not None:
            far_marks.take()  # what played before now cannot be in the coming periods
        self._base = far.consumed + far.skip(far.available)  # the tap's position at far index 0
        self._tap, self._far_rate = far, far_rate
        self._resampler = _resampler(far_rate, aec)
        self._up, self._down = _resampler(rate, aec), _resampler(aec, rate)
        self._back = Ring(max(1, 4 * rate))  # cleaned near end on its way back to ``rate``
        self._far = Ring(max(1, 4 * aec))  # written = far samples ever played, at ``aec_rate``
        self._dac = np.zeros((2, 0))  # far index and DAC time of each tap block, by index
        self._near = 0  # near samples ever processed, at ``aec_rate``
        self._offset: int | None = None  # far index = near index + offset (queue positions)
        self._timed: int | None = None  # the same, by time
        self._time_tolerance = round(TIME_TOLERANCE_S * aec)
        self._untimed_said = False
        self.realigned = 0  # re-anchors after the first (drift or an overflowed tap)
        self.gaps = 0  # jumps in time the timed alignment followed (an xrun on either side)
        self.padded = 0  # zeros put before the near end when the way back ran short

    @property
    def timed(self) -> bool:
        """Whether the far end is lined up by ADC and DAC times (else by queue position)."""
        return self._timed is not None and not self._untimed_said

    def process(
        self, near: np.ndarray, backlog: int = 0, times: Timeline | None = None
    ) -> np.ndarray:
        """Return ``near`` (float32 mono at ``rate``) with the played audio's echo removed.

        ``backlog``: microphone samples (at ``rate``) captured after ``near`` and still queued;
        ``times``: when ``near``'s blocks were captured (the source's timeline; None: unknown).
        """
        self._take_played()
        n = len(near)
        up = np.ascontiguousarray(near, dtype=np.float32)
        if self._up is not None:
            up = self._up.resample_chunk(up)
            backlog = round(backlog * self.aec_rate / self.rate)
        m = len(up)
        ideal = self._far.written - backlog - self._margin - (self._near + m)
        far = self._far_by_time(m, times, ideal)
        if far is None:
            far = self._far_by_queue(m, ideal)
        self._near += m
        cleaned: np.ndarray = self._aec.process(up, far) if m else up
        if self._down is None:
            return cleaned
        return self._back_to_rate(self._down, cleaned, n)

    def _far_by_queue(self, m: int, ideal: int) -> np.ndarray:
        """The far block by queue position: the locked counter offset (module doc)."""
        if self._offset is None or abs(ideal - self._offset) > self._tolerance:
            self.realigned += int(self._offset is not None)
            self._offset = ideal
        far = np.zeros(m, dtype=np.float32)
        self._far.peek_into(self._near + self._offset, far)
        return far

    def _far_by_time(self, m: int, times: Timeline | None, ideal: int) -> np.ndarray | None:
        """The far block by time: for each near block, what was at the DAC when it hit the ADC
        (None where the times are missing or on another clock: said once, queues from then)."""
        if self._untimed_said:
            return None
        why = self._untimed(times)
        if why is None and times is not None:
            index, dac = self._dac
            if not index.size:  # nothing played yet
                return None
            scale = self.aec_rate / times.rate
            starts = np.minimum(m, np.round(times.offsets * scale).astype(np.int64))
            ends = np.append(starts[1:], m)
            # The far index at each block's ADC time: the marks read backwards (time -> index).
            wanted = [
                round(time_at(t, dac, index, 1.0 / self.aec_rate)) - (self._near + int(a))
                for a, t in zip(starts, times.times, strict=True)
            ]
            doubt = CLOCK_DOUBT_S * self.aec_rate
            if self._timed is not None or abs(wanted[0] - ideal - self._margin) <= doubt:
                return self._timed_block(m, starts, ends, wanted)
            why = "the microphone's and the speaker's times are not on one clock"
        if why is not None:
            self._untimed_said = True
            log.warning("echo cancellation: %s; lining up by queue position instead", why)
        return None

    def _untimed(self, times: Timeline | None) -> str | None:
        """Why the far end cannot be lined up by time (None: it can, or not known yet)."""
        if times is None:
            return "the microphone's host gives no ADC times (PortAudio reports 0.0)"
        played_s = (self._tap.consumed - self._base) / self._far_rate
        if self._far_marks is None or (not self._dac[0].size and played_s > UNTIMED_AFTER_S):
            return "the speaker's host gives no DAC times (PortAudio reports 0.0)"
        return None

    def _timed_block(
        self, m: int, starts: np.ndarray, ends: np.ndarray, wanted: list[int]
    ) -> np.ndarray:
        far = np.zeros(m, dtype=np.float32)
        if self._timed is None:
            self._aec.stream_delay_ms = 0  # lined up at the converters: no delay to hint
        for a, b, offset in zip(starts, ends, wanted, strict=True):
            if self._timed is None or abs(offset - self._timed) > self._time_tolerance:
                self.gaps += int(self._timed is not None)
                self._timed = offset
            if b > a:
                self._far.peek_into(self._near + int(a) + self._timed, far[a:b])
        return far

    def _back_to_rate(self, down: soxr.ResampleStream, cleaned: np.ndarray, n: int) -> np.ndarray:
        """``n`` samples at ``rate`` of the cleaned stream; zeros first when it runs short."""
        self._back.write(down.resample_chunk(cleaned))
        out = np.zeros(n, dtype=np.float32)
        short = max(0, n - self._back.available)
        self.padded += short
        self._back.read_into(out[short:])
        return out

    def _take_played(self) -> None:
        """What the sink played since the last period, at ``aec_rate``, with its DAC times."""
        if self._far_marks is not None:
            index, dac, _ = self._far_marks.take()
            keep = index >= self._base
            if keep.any():
                at = (index[keep] - self._base) * self.aec_rate / self._far_rate
                self._dac = np.concatenate([self._dac, np.stack([at, dac[keep]])], axis=1)
                held = self._far.written - self._far.capacity  # older far samples are gone
                first = max(0, int(np.searchsorted(self._dac[0], held, side="right")) - 1)
                self._dac = self._dac[:, first:]
        played = self._tap.read()
        if not played.size:
            return
        if self._resampler is not None:
            played = self._resampler.resample_chunk(played)
        self._far.skip(len(played) - self._far.free)  # keep ``written`` a true sample clock
        self._far.write(played)

"""Optional acoustic echo cancellation: the assistant must not hear itself on the speakers.

WebRTC's AEC3 through ``pywebrtc-audio`` (``EchoCanceller(sample_rate, num_channels,
stream_delay_ms).process(near, far)``, float32 in and out, 10 ms frames inside). The near end
is the microphone at the model rate; the far end is what the sink's callback actually played
(its tap ring, device rate), resampled with a stateful soxr stream to the same rate.

Alignment is locked, not re-derived every period. AEC3 finds the echo's delay itself, within
about half a second, but only while that delay stays put and the far end comes first. So far and
near are tied by their sample counters: far index = near index + ``offset``. The first period
sets the offset so that the near block's last sample meets what played ``margin`` before it was
captured (``backlog`` tells how long ago that was), with ``margin`` half the echo path PortAudio
reports: the far end then leads the echo by about the other half, and a callback burst up to
half the path's length neither makes it late nor asks for audio not yet played. The offset is
kept while the measured ideal stays within ``tolerance_s`` of it: periods that arrive early or
late move nothing. Only a larger jump (two device clocks drifting apart, a tap that
overflowed) re-anchors it, counted in ``realigned``. Runs on the engine thread, inside
``read_period``.

Rates. AEC3 takes 16, 32 or 48 kHz only (:data:`AEC_RATES`); a model that hears another rate
(Moshi: 24 kHz) is cancelled at the next rate up (:func:`canceller_rate`): the near end goes up
and back down through stateful soxr streams, and so does the far end. The way back comes in
soxr's bursts: a period that finds it short is padded with zeros at its start, once, which
delays the near end by that much for the rest of the stream (counted in ``padded``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np
import soxr

from app.audio.devices import AudioError
from app.audio.rings import Ring

AEC_RATES = (16000, 32000, 48000)  # the rates WebRTC's AEC3 accepts

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
    """AEC3 on microphone periods with the sink's played audio as the far end (module doc)."""

    def __init__(
        self,
        far: Ring,
        far_rate: float,
        rate: int = 16000,
        delay_ms: int = 0,
        tolerance_s: float = 0.1,
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
        far.skip(far.available)  # what played before now cannot be in the coming periods
        self._tap = far
        self._resampler = _resampler(far_rate, aec)
        self._up, self._down = _resampler(rate, aec), _resampler(aec, rate)
        self._back = Ring(max(1, 4 * rate))  # cleaned near end on its way back to ``rate``
        self._far = Ring(max(1, 4 * aec))  # written = far samples ever played, at ``aec_rate``
        self._near = 0  # near samples ever processed, at ``aec_rate``
        self._offset: int | None = None  # far index = near index + offset
        self.realigned = 0  # re-anchors after the first (drift or an overflowed tap)
        self.padded = 0  # zeros put before the near end when the way back ran short

    def process(self, near: np.ndarray, backlog: int = 0) -> np.ndarray:
        """Return ``near`` (float32 mono at ``rate``) with the played audio's echo removed.

        ``backlog``: microphone samples (at ``rate``) captured after ``near`` and still queued.
        """
        self._take_played()
        n = len(near)
        up = np.ascontiguousarray(near, dtype=np.float32)
        if self._up is not None:
            up = self._up.resample_chunk(up)
            backlog = round(backlog * self.aec_rate / self.rate)
        m = len(up)
        ideal = self._far.written - backlog - self._margin - (self._near + m)
        if self._offset is None or abs(ideal - self._offset) > self._tolerance:
            self.realigned += int(self._offset is not None)
            self._offset = ideal
        far = self._far_block(self._near + self._offset, m)
        self._near += m
        cleaned: np.ndarray = self._aec.process(up, far) if m else up
        if self._down is None:
            return cleaned
        return self._back_to_rate(self._down, cleaned, n)

    def _back_to_rate(self, down: soxr.ResampleStream, cleaned: np.ndarray, n: int) -> np.ndarray:
        """``n`` samples at ``rate`` of the cleaned stream; zeros first when it runs short."""
        self._back.write(down.resample_chunk(cleaned))
        out = np.zeros(n, dtype=np.float32)
        short = max(0, n - self._back.available)
        self.padded += short
        self._back.read_into(out[short:])
        return out

    def _take_played(self) -> None:
        played = self._tap.read()
        if not played.size:
            return
        if self._resampler is not None:
            played = self._resampler.resample_chunk(played)
        self._far.skip(len(played) - self._far.free)  # keep ``written`` a true sample clock
        self._far.write(played)

    def _far_block(self, start: int, n: int) -> np.ndarray:
        """Far samples ``start`` .. ``start + n``; zeros for those dropped or not yet played."""
        far = np.zeros(n, dtype=np.float32)
        ring = self._far
        ring.skip(start - ring.consumed)  # no-op when ``start`` lies behind it
        begin = min(n, max(0, ring.consumed - start))
        ring.read_into(far[begin:])
        return far

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
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np
import soxr

from app.audio.devices import AudioError
from app.audio.rings import Ring

INSTALL_HINT = (
    "echo cancellation needs the optional package pywebrtc-audio: pip install pywebrtc-audio "
    "(or turn echo cancellation off)"
)


def _webrtc() -> ModuleType:
    try:
        return importlib.import_module("pywebrtc_audio")
    except ImportError as exc:
        raise AudioError(f"{INSTALL_HINT} ({exc})") from exc


def echo_available() -> bool:
    """Whether echo cancellation can be turned on here (pywebrtc-audio is importable)."""
    try:
        _webrtc()
    except AudioError:
        return False
    return True


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
        path = max(0, int(delay_ms))  # echo path: output + input latency, in ms
        self._margin = round(path / 2 * rate / 1000)
        self._tolerance = round(tolerance_s * rate)
        self._aec = module.EchoCanceller(
            sample_rate=rate, num_channels=1, stream_delay_ms=path - path // 2
        )
        far.skip(far.available)  # what played before now cannot be in the coming periods
        self._tap = far
        self._resampler = (
            None if round(far_rate) == rate else soxr.ResampleStream(far_rate, rate, 1, "float32")
        )
        self._far = Ring(max(1, 4 * rate))  # written = far samples ever played, at ``rate``
        self._near = 0  # near samples ever processed
        self._offset: int | None = None  # far index = near index + offset
        self.realigned = 0  # re-anchors after the first (drift or an overflowed tap)

    def process(self, near: np.ndarray, backlog: int = 0) -> np.ndarray:
        """Return ``near`` (float32 mono at ``rate``) with the played audio's echo removed.

        ``backlog``: microphone samples (at ``rate``) captured after ``near`` and still queued.
        """
        self._take_played()
        n = len(near)
        ideal = self._far.written - backlog - self._margin - (self._near + n)
        if self._offset is None or abs(ideal - self._offset) > self._tolerance:
            self.realigned += int(self._offset is not None)
            self._offset = ideal
        far = self._far_block(self._near + self._offset, n)
        self._near += n
        cleaned: np.ndarray = self._aec.process(np.ascontiguousarray(near, dtype=np.float32), far)
        return cleaned

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

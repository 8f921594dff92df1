"""Optional acoustic echo cancellation: the assistant must not hear itself on the speakers.

WebRTC's AEC3 through ``pywebrtc-audio`` (``EchoCanceller(sample_rate, num_channels,
stream_delay_ms).process(near, far)``, float32 in and out, 10 ms frames inside). The near end
is the microphone at the model rate; the far end is what the sink's callback actually played
(its tap ring, device rate), resampled with a stateful soxr stream to the same rate. Played
audio reaches the tap before its echo reaches the microphone, so the far end leads, as AEC3
needs; ``max_lead_s`` bounds that lead so two device clocks drifting apart cannot push the
echo outside the canceller's delay range. Runs on the engine thread, inside ``read_period``.
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
        max_lead_s: float = 0.25,
    ) -> None:
        module = _webrtc()
        self.rate = rate
        self._aec = module.EchoCanceller(
            sample_rate=rate, num_channels=1, stream_delay_ms=max(0, int(delay_ms))
        )
        far.skip(far.available)  # what played before now cannot be in the coming periods
        self._tap = far
        self._resampler = (
            None if round(far_rate) == rate else soxr.ResampleStream(far_rate, rate, 1, "float32")
        )
        self._far = Ring(max(1, 4 * rate))
        self._max_lead = round(max_lead_s * rate)

    def process(self, near: np.ndarray) -> np.ndarray:
        """Return ``near`` (float32 mono at ``rate``) with the played audio's echo removed."""
        played = self._tap.read()
        if played.size:
            resampler = self._resampler
            self._far.write(played if resampler is None else resampler.resample_chunk(played))
        far = np.zeros_like(near)
        self._far.read_into(far)  # short: the rest of this period played as silence
        excess = self._far.available - self._max_lead
        if excess > 0:
            self._far.skip(excess)
        cleaned: np.ndarray = self._aec.process(np.ascontiguousarray(near, dtype=np.float32), far)
        return cleaned

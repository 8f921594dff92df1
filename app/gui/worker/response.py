"""Response latency: from the end of the user's speech to the assistant's first sound. No Qt.

The engine thread feeds each period: what the model heard (the microphone after gain and
push-to-talk) and what it played, with the time the played audio starts (the period's end plus
its processing: the sink gets it then). Speech and sound are 20 ms blocks whose peak is above
``threshold_db``. The clock arms at the end of each stretch of speech and reports the gap to the
first sound after it, once; sound that starts while the user still talks is no response (it is
the assistant carrying on, or talking over the user).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ResponseClock"]


def _loud(samples: np.ndarray, rate: int, block_s: float, threshold: float) -> np.ndarray:
    """Per ``block_s`` block of ``samples``: whether its peak is above ``threshold``."""
    flat = np.asarray(samples, dtype=np.float32).reshape(-1)
    block = max(1, round(rate * block_s))
    usable = flat.size - flat.size % block
    if usable == 0:
        return np.zeros(0, dtype=bool)
    return np.asarray(np.abs(flat[:usable].reshape(-1, block)).max(axis=1) > threshold)


class ResponseClock:
    """Feed :meth:`feed` once per period; it returns a latency in seconds when one completes."""

    def __init__(
        self, mic_rate: int, out_rate: int, threshold_db: float = -45.0, block_s: float = 0.02
    ) -> None:
        self.mic_rate, self.out_rate, self.block_s = mic_rate, out_rate, block_s
        self.threshold = float(10 ** (threshold_db / 20))
        self._speech_end: float | None = None  # session seconds; None: no speech waits
        self._sounding = False  # the last played block was loud

    def feed(
        self, t_s: float, heard: np.ndarray, played: np.ndarray, played_at: float
    ) -> float | None:
        """``heard`` spans [t_s, t_s + its length); ``played`` starts at ``played_at``."""
        speech = np.flatnonzero(_loud(heard, self.mic_rate, self.block_s, self.threshold))
        if speech.size:
            self._speech_end = t_s + (int(speech[-1]) + 1) * self.block_s
        sound = _loud(played, self.out_rate, self.block_s, self.threshold)
        before = np.concatenate(([self._sounding], sound[:-1])) if sound.size else sound
        onsets = played_at + np.flatnonzero(sound & ~before) * self.block_s
        if sound.size:
            self._sounding = bool(sound[-1])
        if self._speech_end is None:
            return None
        after = onsets[onsets >= self._speech_end]
        if not after.size:
            return None
        latency = float(after[0]) - self._speech_end
        self._speech_end = None
        return latency

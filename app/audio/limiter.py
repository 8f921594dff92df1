"""Safe levels on both ends, no Qt: microphone gain in, volume, mute and a peak limiter out.

:class:`PeakLimiter` never lets a sample past ``ceiling`` (default -1 dBFS), whatever it is fed
(full-scale noise, a NaN from a broken model): the gain drops at once, inside the 5 ms block
whose peak needs it, and recovers over ``release_s``; recovering ramps only ever rise toward a
gain the block itself allows, and a final clip at the ceiling catches rounding. Quiet audio
(peaks under the ceiling, the limiter at rest) passes bit for bit.

:class:`OutputStage` applies the user's volume and mute before the limiter, plus a fixed
``trim_db`` (the window passes :data:`RANDOM_WEIGHTS_TRIM_DB` for seeded random weights, whose
"speech" is noise near full scale). :class:`MicStage` applies the microphone gain and counts
samples at full scale (the clip lamp). Volume, mute and gain are plain attributes: any thread
may set them, the engine thread reads them once per period.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "CLIP_LEVEL",
    "RANDOM_WEIGHTS_TRIM_DB",
    "MicStage",
    "OutputStage",
    "PeakLimiter",
    "db_to_gain",
]

RANDOM_WEIGHTS_TRIM_DB = -20.0  # seeded random weights play noise: 20 dB below the volume
CLIP_LEVEL = 0.999  # a microphone sample at or above this magnitude counts as clipped


def db_to_gain(db: float) -> float:
    """Linear gain of ``db`` decibels (``-inf`` gives 0)."""
    return 0.0 if db == -math.inf else float(10.0 ** (db / 20.0))


class PeakLimiter:
    """A block peak limiter with instant attack (see the module doc). Engine thread only.

    Args:
        rate: sample rate in Hz (sets the block and release lengths).
        ceiling_db: the most any output sample reaches, in dBFS (negative).
        release_s: time constant of the gain's recovery after a peak.
        block_s: the attack granularity; a block's gain suits its own peak.
    """

    def __init__(
        self, rate: int, ceiling_db: float = -1.0, release_s: float = 0.25, block_s: float = 0.005
    ) -> None:
        if ceiling_db >= 0:
            raise ValueError(f"ceiling_db {ceiling_db}: give a level below 0 dBFS")
        self.ceiling = db_to_gain(ceiling_db)
        self.block = max(1, round(rate * block_s))
        self._recover = 1.0 - math.exp(-self.block / (rate * release_s))
        self.gain = 1.0  # the gain at the end of the last block processed
        self.limited_blocks = 0  # blocks whose gain was below 1 (the clip lamp's count)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """``samples`` limited (float32, flat, a new array); updates the gain state."""
        x = np.nan_to_num(np.asarray(samples, dtype=np.float32).reshape(-1), posinf=0, neginf=0)
        n = x.size
        if n == 0:
            return x.copy()
        blocks = -(-n // self.block)
        padded = np.zeros(blocks * self.block, dtype=np.float32)
        padded[:n] = x
        frames = padded.reshape(blocks, self.block)
        peaks = np.abs(frames).max(axis=1)
        allowed = np.minimum(1.0, self.ceiling / np.maximum(peaks, 1e-12))
        start = np.empty(blocks, dtype=np.float64)
        end = np.empty(blocks, dtype=np.float64)
        gain = self.gain
        for i, limit in enumerate(allowed.tolist()):  # ~200 blocks a second: cheap in Python
            target = min(limit, gain + (1.0 - gain) * self._recover)
            # Falling: the new gain from the block's first sample. Rising: a ramp up to it.
            start[i] = target if target < gain else gain
            end[i] = gain = target
        self.gain = gain
        self.limited_blocks += int(np.count_nonzero(np.minimum(start, end) < 1.0))
        if gain >= 1.0 and start.min() >= 1.0:
            return np.clip(x, -self.ceiling, self.ceiling)  # at rest: unchanged below the ceiling
        ramp = (np.arange(1, self.block + 1, dtype=np.float64) / self.block)[np.newaxis, :]
        curve = start[:, np.newaxis] + (end - start)[:, np.newaxis] * ramp
        out = (frames * curve).astype(np.float32).reshape(-1)[:n]
        return np.clip(out, -self.ceiling, self.ceiling)


class OutputStage:
    """Volume, mute and the limiter for the assistant's audio (see the module doc)."""

    def __init__(
        self, rate: int, volume_db: float = 0.0, muted: bool = False, trim_db: float = 0.0
    ) -> None:
        self.volume_db = volume_db
        self.muted = muted
        self.trim_db = trim_db
        self.limiter = PeakLimiter(rate)

    def process(self, pcm: np.ndarray) -> np.ndarray:
        """One period as it is played: scaled, muted or limited (float32, flat, new array)."""
        gain = 0.0 if self.muted else db_to_gain(self.volume_db + self.trim_db)
        scaled = np.asarray(pcm, dtype=np.float32).reshape(-1) * np.float32(gain)
        return self.limiter.process(scaled)


class MicStage:
    """Microphone gain (``gain_db``) and the count of clipped samples after it."""

    def __init__(self, gain_db: float = 0.0) -> None:
        self.gain_db = gain_db
        self.clipped = 0  # samples at full scale after the gain, since the session began

    def process(self, mic: np.ndarray) -> np.ndarray:
        """``mic`` with the gain applied, kept within [-1, 1] (float32, flat, new array)."""
        x = np.asarray(mic, dtype=np.float32).reshape(-1) * np.float32(db_to_gain(self.gain_db))
        self.clipped += int(np.count_nonzero(np.abs(x) >= CLIP_LEVEL))
        out: np.ndarray = np.clip(x, -1.0, 1.0)
        return out

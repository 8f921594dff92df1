"""Real speech for tests: ``espeak-ng`` utterances and conversations built from them.

Turn-taking is only tested honestly on speech a real voice-activity model hears as speech, so the
tests synthesize it with the ``espeak-ng`` binary (installed by scripts/setup.sh and in CI) instead
of tones or noise. A missing binary skips the test with the fix.

    talk = conversation([0.5, "hello, how are you today", 3.0, "wait, stop", 2.0])
    talk.audio            # float32 mono at 16 kHz
    talk.speech           # ((0.5, 1.9), (4.9, 5.7)): where each utterance is, in seconds
    talk.periods(1.0)     # whole periods of samples, the last padded with silence
    talk.write(path)      # a 16-bit WAV for the headless loop
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

__all__ = ["Conversation", "conversation", "espeak", "espeak_binary"]

_TRIM = 1e-3  # |sample| below this at an utterance's ends is espeak's padding, not speech


def espeak_binary() -> str:
    """The ``espeak-ng`` executable, or skip the calling test with the fix."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        pytest.skip("install espeak-ng (scripts/setup.sh does)")
    return binary


def espeak(
    text: str, path: Path | str, rate: int = 16000, voice: str = "en", speed: int = 160
) -> np.ndarray:
    """Speak ``text`` with espeak-ng into ``path`` (its own WAV, 22.05 kHz) and return it as
    float32 mono at ``rate`` (resampled with soxr). ``speed`` is in words per minute."""
    binary = espeak_binary()
    cmd = [binary, "-v", voice, "-s", str(speed), "-w", str(path), text]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"espeak-ng failed ({done.returncode}): {done.stderr.strip()}; check the voice "
            f"{voice!r} exists (`espeak-ng --voices`)"
        )
    audio, source_rate = sf.read(str(path), dtype="float32", always_2d=True)
    mono = audio.mean(axis=1)
    if source_rate != rate:
        mono = soxr.resample(mono, source_rate, rate)
    out: np.ndarray = np.ascontiguousarray(mono, dtype=np.float32)
    return out


@cache
def _utterance(text: str, rate: int, voice: str, speed: int) -> np.ndarray:
    """One trimmed utterance, synthesized once per process (read-only: callers copy)."""
    with tempfile.TemporaryDirectory(prefix="dc-espeak-") as folder:
        audio = espeak(text, Path(folder) / "utterance.wav", rate, voice, speed)
    loud = np.flatnonzero(np.abs(audio) > _TRIM)
    trimmed = audio[loud[0] : loud[-1] + 1] if loud.size else audio[:0]
    trimmed.setflags(write=False)
    return trimmed


@dataclass(frozen=True)
class Conversation:
    """The user's side of a conversation: audio and where its utterances are."""

    audio: np.ndarray  # float32 mono
    rate: int
    speech: tuple[tuple[float, float], ...]  # (start_s, end_s) of each utterance, in order

    @property
    def seconds(self) -> float:
        return self.audio.size / self.rate

    def periods(self, period_s: float = 1.0) -> list[np.ndarray]:
        """The audio in whole periods (copies), the last one padded with silence."""
        n = round(period_s * self.rate)
        count = -(-self.audio.size // n)
        padded = np.zeros(count * n, dtype=np.float32)
        padded[: self.audio.size] = self.audio
        return [padded[i * n : (i + 1) * n].copy() for i in range(count)]

    def write(self, path: Path | str) -> Path:
        """A 16-bit PCM WAV of the audio (what a headless ``--input`` reads)."""
        sf.write(str(path), self.audio, self.rate, subtype="PCM_16")
        return Path(path)


def conversation(
    segments: Sequence[str | float], rate: int = 16000, voice: str = "en", speed: int = 160
) -> Conversation:
    """Join utterances (``str``: spoken by espeak-ng, trimmed) and silences (``float`` seconds)."""
    parts: list[np.ndarray] = []
    spans: list[tuple[float, float]] = []
    at = 0
    for segment in segments:
        if isinstance(segment, str):
            part = _utterance(segment, rate, voice, speed)
            spans.append((at / rate, (at + part.size) / rate))
        elif segment >= 0:
            part = np.zeros(round(segment * rate), dtype=np.float32)
        else:
            raise ValueError(f"silence of {segment} s: durations are >= 0 seconds")
        parts.append(part)
        at += part.size
    audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    return Conversation(audio.astype(np.float32), rate, tuple(spans))

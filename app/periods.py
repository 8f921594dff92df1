"""Sources and sinks of whole native periods: WAV files, silence (audio devices: ``app.audio``).

A source hands the loop one period of mono float32 at the model's input rate per read; a sink
takes one period of output at a time. ``app.audio``'s ``DeviceSource``/``DeviceSink`` conform
to the same protocols structurally, so the headless command and the app run one loop.

``WavSource`` resamples with ``soxr`` (whole file, once, at open) and pads the last period with
silence; with ``realtime=True`` it hands out each period no earlier than the wall clock allows
(as a microphone would), else as fast as the loop asks (a simulated clock). ``WavSink`` collects
periods in memory and writes the WAV on ``close`` with :func:`engine.files.atomic_write`: a
temporary file in the destination folder, flushed, then renamed over the name, so a crash midway
never leaves a half file and never damages an earlier file of the same name.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from engine.files import atomic_write

__all__ = [
    "PeriodSink",
    "PeriodSource",
    "SilenceSource",
    "WavSink",
    "WavSource",
    "check_wav_path",
    "write_wav",
]


class PeriodSource(Protocol):
    def read_period(self, samples: int, timeout: float | None = None) -> np.ndarray | None:
        """``samples`` float32 mono samples, or None when the input has ended."""
        ...


class PeriodSink(Protocol):
    def write(self, pcm: np.ndarray) -> None: ...


def _mono(audio: np.ndarray) -> np.ndarray:
    return audio if audio.ndim == 1 else audio.mean(axis=1)


class WavSource:
    """Periods of a sound file (any rate, any channel count), resampled to ``rate``.

    Args:
        path: a file ``soundfile`` reads (WAV, FLAC, OGG).
        rate: the rate periods are read at (the backbone's input rate, 16 kHz).
        realtime: pace reads to the wall clock (period ``k`` is ready at ``t0 + (k+1)·period``).
        loop: start over at the end instead of ending (soaks).
    """

    def __init__(
        self, path: str | os.PathLike[str], rate: int, realtime: bool = False, loop: bool = False
    ) -> None:
        import soundfile

        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"input {p} does not exist: pass a WAV file to --input")
        try:
            audio, file_rate = soundfile.read(p, dtype="float32", always_2d=False)
        except (RuntimeError, soundfile.LibsndfileError) as error:
            raise ValueError(f"input {p} is not a sound file soundfile reads ({error})") from None
        audio = _mono(np.asarray(audio, dtype=np.float32))
        if file_rate != rate:
            import soxr

            audio = soxr.resample(audio, file_rate, rate, quality="HQ").astype(np.float32)
        self.path, self.rate, self.realtime, self.loop = p, rate, realtime, loop
        self.audio = np.ascontiguousarray(audio)
        self.position = 0
        self._t0: float | None = None
        self._reads = 0

    @property
    def duration_s(self) -> float:
        return self.audio.size / self.rate

    def periods(self, samples: int) -> int:
        """How many reads of ``samples`` the file gives (the last one padded)."""
        return -(-self.audio.size // samples)

    def read_period(self, samples: int, timeout: float | None = None) -> np.ndarray | None:
        if self.position >= self.audio.size:
            if not self.loop or self.audio.size == 0:
                return None
            self.position = 0
        chunk = self.audio[self.position : self.position + samples]
        self.position += samples
        if chunk.size < samples:
            chunk = np.concatenate([chunk, np.zeros(samples - chunk.size, np.float32)])
        if self.realtime:
            self._pace(samples)
        return chunk.copy()

    def _pace(self, samples: int) -> None:
        """Sleep until this period would have been fully recorded by a microphone."""
        now = time.monotonic()
        if self._t0 is None:
            self._t0 = now
        self._reads += 1
        due = self._t0 + self._reads * samples / self.rate
        if due > now:
            time.sleep(due - now)


class SilenceSource:
    """Endless silence (or ``periods`` of it): the loop listening to a quiet room."""

    def __init__(self, periods: int | None = None) -> None:
        self.remaining = periods

    def read_period(self, samples: int, timeout: float | None = None) -> np.ndarray | None:
        if self.remaining is not None:
            if self.remaining <= 0:
                return None
            self.remaining -= 1
        return np.zeros(samples, dtype=np.float32)


class WavSink:
    """Collects periods; ``close`` writes a 16-bit WAV atomically at ``rate``."""

    def __init__(self, path: str | os.PathLike[str], rate: int) -> None:
        self.path, self.rate = Path(path), rate
        check_wav_path(self.path)
        self._chunks: list[np.ndarray] = []
        self.closed = False

    def write(self, pcm: np.ndarray) -> None:
        if self.closed:
            raise RuntimeError(f"WavSink {self.path} is closed: open a new one to write more")
        self._chunks.append(np.asarray(pcm, dtype=np.float32).reshape(-1).copy())

    @property
    def samples(self) -> np.ndarray:
        """Everything written so far, as one array."""
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)

    def close(self) -> Path:
        if not self.closed:
            write_wav(self.path, self.samples, self.rate)
            self.closed = True
        return self.path


def check_wav_path(path: Path) -> None:
    """Refuse an output path that cannot take a WAV, before any work."""
    if path.suffix.lower() != ".wav":
        raise ValueError(f"output {path} must end in .wav: use {path.with_suffix('.wav')}")
    if not path.parent.is_dir():
        raise ValueError(f"output folder {path.parent} does not exist: mkdir -p {path.parent}")
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"output folder {path.parent} is not writable: choose another")


def write_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    """``samples`` (float, clipped to [-1, 1]; or int16) as a 16-bit mono WAV, atomically."""
    import soundfile

    if samples.dtype != np.int16:
        samples = np.clip(np.asarray(samples, np.float32), -1.0, 1.0)

    def write(f: IO[bytes]) -> None:
        soundfile.write(f, samples, rate, subtype="PCM_16", format="WAV")

    return atomic_write(path, write)

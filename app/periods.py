"""Sources and sinks of whole native periods: WAV files, silence (audio devices: ``app.audio``).

A source hands the loop one period of mono float32 at the model's input rate per read; a sink
takes one period of output at a time. ``app.audio``'s ``DeviceSource``/``DeviceSink`` conform
to the same protocols structurally, so the headless command and the app run one loop.

Both stream: memory stays flat in the length of the session. ``WavSource`` reads the file in
blocks and resamples with a ``soxr.ResampleStream`` as the loop asks, padding the last period
with silence; at open it scans the file once, in blocks, so a file holding NaN or inf is refused
before any model loads. With ``realtime=True`` it hands out each period no earlier than the wall
clock allows (as a microphone would), else as fast as the loop asks (a simulated clock).
``WavSink`` writes each period to disk as it comes, 16-bit PCM through the standard ``wave``
module, which rewrites the header's sizes after every write: a session killed at any moment
(SIGKILL, a crash, a power loss after the last sync) leaves a WAV valid up to its last period.
The file is an :class:`engine.files.Output`: never written through a symlink, and an earlier
file of the same name is replaced only when the sink closes after a run that did not fail.
"""

from __future__ import annotations

import os
import time
import wave
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from engine.files import Output, OutputError, atomic_write

__all__ = [
    "PeriodSink",
    "PeriodSource",
    "SilenceSource",
    "WavSink",
    "WavSource",
    "check_input",
    "check_wav_path",
    "write_wav",
]

BLOCK_SAMPLES = 1 << 16  # samples (all channels) read per block: memory per read, not per file
SYNC_PERIODS = 10  # fsync a streamed WAV every this many periods (each period is flushed)


class PeriodSource(Protocol):
    def read_period(self, samples: int, timeout: float | None = None) -> np.ndarray | None:
        """``samples`` float32 mono samples, or None when the input has ended."""
        ...


class PeriodSink(Protocol):
    def write(self, pcm: np.ndarray) -> None: ...


def _mono(audio: np.ndarray) -> np.ndarray:
    return audio if audio.ndim == 1 else audio.mean(axis=1)


FILE_RATES = (1_000, 768_000)  # header rates an input may state (telephone to studio, and more)


class WavSource:
    """Periods of a sound file (any rate, any channel count), resampled to ``rate``, streamed.

    Args:
        path: a file ``soundfile`` reads (WAV, FLAC, OGG).
        rate: the rate periods are read at (the backbone's input rate, 16 kHz).
        realtime: pace reads to the wall clock (period ``k`` is ready at ``t0 + (k+1)·period``).
        loop: start over at the end instead of ending (soaks).

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for a file that is not
    audio, is empty of frames, states a rate outside :data:`FILE_RATES`, or holds NaN or inf
    samples (the message names the first one).
    """

    def __init__(
        self, path: str | os.PathLike[str], rate: int, realtime: bool = False, loop: bool = False
    ) -> None:
        import soundfile

        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"input {p} does not exist: pass a WAV file to --input")
        try:
            self._file = soundfile.SoundFile(p)
        except (RuntimeError, soundfile.LibsndfileError, OSError) as error:
            raise ValueError(f"input {p} is not a sound file soundfile reads ({error})") from None
        self.path, self.rate, self.realtime, self.loop = p, rate, realtime, loop
        self.file_rate, self.frames = int(self._file.samplerate), int(self._file.frames)
        self._check_shape()
        self._block = max(1, BLOCK_SAMPLES // max(1, self._file.channels))
        self._check_finite()
        self._restart()
        self._t0: float | None = None
        self._reads = 0

    def _check_shape(self) -> None:
        """Refuse audio no run can use, before any work: no frames, or a header rate outside
        :data:`FILE_RATES` (2^31 Hz makes every input a few microseconds; 1 Hz, hours)."""
        low, high = FILE_RATES
        problem = None
        if self.frames <= 0:
            problem = "holds no audio (0 frames)"
        elif not low <= self.file_rate <= high:
            problem = f"says its rate is {self.file_rate:,} Hz (audio is {low:,} to {high:,} Hz)"
        if problem is not None:
            self._file.close()
            raise ValueError(f"input {self.path} {problem}: pass a recording of speech")

    def _check_finite(self) -> None:
        """One pass over the file in blocks: refuse NaN or inf before any work."""
        seen = 0
        for block in self._file.blocks(self._block, dtype="float32", always_2d=True):
            finite = np.isfinite(block)
            if not finite.all():
                frame = seen + int(np.argmin(finite.all(axis=1)))
                raise ValueError(
                    f"input {self.path} holds NaN or infinite samples (first at "
                    f"{frame / self.file_rate:.3f} s): re-export it as ordinary PCM audio"
                )
            seen += len(block)

    def _restart(self) -> None:
        import soxr

        self._file.seek(0)
        self._resampler = (
            None
            if self.file_rate == self.rate
            else soxr.ResampleStream(self.file_rate, self.rate, 1, dtype="float32", quality="HQ")
        )
        self._pending = np.zeros(0, np.float32)
        self._ended = False
        self._produced = 0

    @property
    def duration_s(self) -> float:
        return self.frames / self.file_rate

    @property
    def samples(self) -> int:
        """Samples at ``rate`` the file gives (as ``soxr`` resamples it)."""
        return -(-self.frames * self.rate // self.file_rate)

    def periods(self, samples: int) -> int:
        """How many reads of ``samples`` the file gives (the last one padded)."""
        return -(-self.samples // samples)

    def _fill(self, samples: int) -> None:
        """Read and resample blocks until ``samples`` are pending or the file has ended."""
        parts = [self._pending]
        have = self._pending.size
        while have < samples and not self._ended:
            block = self._file.read(self._block, dtype="float32", always_2d=True)
            last = len(block) < self._block
            mono = np.ascontiguousarray(_mono(block), dtype=np.float32)
            if self._resampler is not None:
                mono = self._resampler.resample_chunk(mono, last=last)
            parts.append(np.asarray(mono, np.float32))
            have += mono.size
            self._ended = last
        self._pending = np.concatenate(parts)

    def read_period(self, samples: int, timeout: float | None = None) -> np.ndarray | None:
        self._fill(samples)
        if self._pending.size == 0:
            if not self.loop or self.frames == 0:
                return None
            self._restart()
            self._fill(samples)
        chunk, self._pending = self._pending[:samples], self._pending[samples:]
        if chunk.size < samples:
            chunk = np.concatenate([chunk, np.zeros(samples - chunk.size, np.float32)])
        if self.realtime:
            self._pace(samples)
        return chunk.copy()

    def close(self) -> None:
        self._file.close()

    def _pace(self, samples: int) -> None:
        """Sleep until this period would have been fully recorded by a microphone."""
        now = time.monotonic()
        if self._t0 is None:
            self._t0 = now
        self._reads += 1
        due = self._t0 + self._reads * samples / self.rate
        if due > now:
            time.sleep(due - now)


def check_input(path: Path) -> float:
    """Check an input file before any work (exists, is audio, holds no NaN or inf: one pass in
    blocks); returns its duration in seconds. Raises ``ValueError`` naming the fix."""
    source = WavSource(path, 1)  # the rate is irrelevant: nothing is resampled until a read
    try:
        return source.duration_s
    finally:
        source.close()


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
    """Writes each period to a 16-bit mono WAV at ``rate`` as it comes (see the module docstring).

    Args:
        path: the ``.wav`` to write.
        rate: its sample rate.
        overwrite: replace a file already there when the sink closes; without it such a file is
            refused (``ValueError`` naming ``flag``).
        flag: the command-line flag that allows replacing, for the message.

    Non-finite samples are written as silence and counted in ``nonfinite`` (the caller says so).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        rate: int,
        *,
        overwrite: bool = False,
        flag: str = "--force",
    ) -> None:
        self.path, self.rate = Path(path), rate
        check_wav_path(self.path)
        try:
            self._output = Output(self.path, overwrite=overwrite, flag=flag)
        except OSError as error:  # OutputError says what and the fix; others name the cause
            raise ValueError(
                f"output {error}"
                if isinstance(error, OutputError)
                else f"cannot write output {self.path} ({error})"
            ) from None
        self._wav = wave.open(self._output.file, "wb")  # noqa: SIM115 (closed by close/abort)
        self._wav.setnchannels(1)
        self._wav.setsampwidth(2)
        self._wav.setframerate(rate)
        self._wav.writeframes(b"")  # the header, valid with zero frames
        self._output.file.flush()
        self.frames = self.nonfinite = 0
        self._writes = 0
        self.closed = False

    def write(self, pcm: np.ndarray) -> None:
        if self.closed:
            raise RuntimeError(f"WavSink {self.path} is closed: open a new one to write more")
        samples = np.asarray(pcm, dtype=np.float32).reshape(-1)
        bad = ~np.isfinite(samples)
        if bad.any():
            self.nonfinite += int(bad.sum())
            samples = np.where(bad, np.float32(0), samples)
        self._wav.writeframes(_pcm16(samples).tobytes())  # rewrites the header's sizes
        self._output.file.flush()  # in the kernel: survives a kill of this process
        self.frames += samples.size
        self._writes += 1
        if self._writes % SYNC_PERIODS == 0:
            self._output.sync()

    def close(self) -> Path:
        """Finish the file (idempotent); an earlier file of the same name is replaced now."""
        if not self.closed:
            self.closed = True
            self._wav.close()  # patches the header; the Output owns (and closes) the file
            self._output.commit()
        return self.path

    def abort(self, *, discard: bool = False) -> None:
        """Finish after a failed run: an earlier file of the same name stays as it was; a new
        one keeps the periods written, unless ``discard`` (audio that is no result)."""
        if not self.closed:
            self.closed = True
            try:
                self._wav.close()
            finally:
                self._output.abort(discard=discard)


def _pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples (clipped to [-1, 1]) as int16, as ``soundfile``'s PCM_16 scales them."""
    clipped = np.clip(samples, -1.0, 1.0)
    out: np.ndarray = np.round(clipped * 32767.0).astype("<i2")
    return out


def check_wav_path(path: Path) -> None:
    """Refuse an output path that cannot take a WAV, before any work."""
    if path.suffix.lower() != ".wav":
        raise ValueError(f"output {path} must end in .wav: use {path.with_suffix('.wav')}")
    if not path.parent.is_dir():
        raise ValueError(f"output folder {path.parent} does not exist: mkdir -p {path.parent}")
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"output folder {path.parent} is not writable: choose another")


def write_wav(path: Path, samples: np.ndarray, rate: int, *, overwrite: bool = True) -> Path:
    """``samples`` (float, clipped to [-1, 1]; or int16) as a 16-bit mono WAV, atomically.

    Refuses (``ValueError``) float samples that hold NaN or inf: such audio is a failed model,
    not a result, and must not replace an earlier file.
    """
    import soundfile

    if samples.dtype != np.int16:
        samples = np.asarray(samples, np.float32)
        bad = int(np.count_nonzero(~np.isfinite(samples)))
        if bad:
            raise ValueError(
                f"{bad} of {samples.size} samples for {path} are NaN or infinite; nothing written"
            )
        samples = np.clip(samples, -1.0, 1.0)

    def write(f: IO[bytes]) -> None:
        soundfile.write(f, samples, rate, subtype="PCM_16", format="WAV")

    try:
        return atomic_write(path, write, overwrite=overwrite)
    except OutputError as error:
        raise ValueError(f"output {error}") from None

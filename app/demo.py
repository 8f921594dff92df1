"""The demo conversation: what the app hears when no microphone is at hand.

Three short utterances spoken by espeak-ng (``assets/talk/*.flac``, 16 kHz; regenerate them with
``python3 bench/converse.py --make-talk``) on a seeded schedule: a question answered in full, a
follow-up, an interruption that barges in on the answer, repeated. ``duplexcadence demo`` runs
the headless conversation on it; ``bench/converse.py`` and ``bench/soak.py`` use the same talk,
so a demo, a benchmark and a soak hear exactly the same user.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import platformdirs

from engine.files import OutputError, atomic_write

TALK = Path(__file__).resolve().parents[1] / "assets" / "talk"
UTTERANCES = {
    "question": "hi there, what will the weather be like tomorrow",
    "followup": "and what should I wear for a walk in the park",
    "interrupt": "no wait, stop, stop talking please",
}
RATE = 16_000


def demo_dir() -> Path:
    """Where ``duplexcadence demo`` writes its input, audio and traces (the user data folder)."""
    return Path(platformdirs.user_data_dir("duplexcadence")) / "demo"


def _clips() -> dict[str, np.ndarray]:
    import soundfile

    clips: dict[str, np.ndarray] = {}
    for name in UTTERANCES:
        path = TALK / f"{name}.flac"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: reinstall the package or run "
                "`python3 bench/converse.py --make-talk`"
            )
        clips[name], _ = soundfile.read(path, dtype="float32")
    return clips


def talk_parts(seconds: float, seed: int = 0) -> Iterator[np.ndarray]:
    """The talk of :func:`talk` as the utterances and pauses it is made of (the last one cut),
    one at a time: a talk of any length in the memory of one part."""
    clips, rng = _clips(), np.random.default_rng(seed)
    left = round(seconds * RATE)

    def part(audio: np.ndarray) -> np.ndarray:
        nonlocal left
        audio, left = audio[:left], left - min(left, audio.size)
        return audio

    yield part(np.zeros(RATE // 2, np.float32))
    while left > 0:
        # An answer of at most 8 s ends before the next question; the follow-up is cut short.
        for name, gap in (("question", 9.5), ("followup", 2.0), ("interrupt", 3.0)):
            pause = np.zeros(round((gap + rng.uniform(0, 1)) * RATE), np.float32)
            yield part(clips[name])
            yield part(pause)


def talk(seconds: int, seed: int = 0) -> np.ndarray:
    """``seconds`` s of the user's side at 16 kHz: the seeded schedule over the utterances."""
    return np.concatenate(list(talk_parts(seconds, seed)))


def talk_periods(periods: int, seed: int = 0) -> list[np.ndarray]:
    """The talk cut into ``periods`` one-second periods."""
    audio = talk(periods, seed)
    return [audio[k * RATE : (k + 1) * RATE].copy() for k in range(periods)]


def write_talk(path: Path, seconds: float, seed: int = 0) -> Path:
    """The talk as a 16-bit WAV at ``path`` (its folder created; written atomically), streamed
    part by part: hours of talk in the memory of one utterance.

    Written with the standard library's ``wave`` (pure Python): ``soundfile`` writing to a file
    object calls back into Python through cffi, where a SIGTERM or Ctrl-C became a cffi
    traceback instead of the interrupt that ends the command."""
    import wave

    path.parent.mkdir(parents=True, exist_ok=True)

    def write(f: IO[bytes]) -> None:
        with wave.open(f, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(RATE)
            for part in talk_parts(seconds, seed):
                # libsndfile's float-to-PCM16 (scale 32768, round, clip): the same bytes
                pcm = np.clip(np.round(part * 32768.0), -32768, 32767).astype("<i2")
                wav.writeframes(pcm.tobytes())

    try:
        return atomic_write(path, write)
    except OutputError as error:
        raise ValueError(f"output {error}") from None

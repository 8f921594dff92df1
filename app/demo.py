"""The demo conversation: what the app hears when no microphone is at hand.

Three short utterances spoken by espeak-ng (``assets/talk/*.flac``, 16 kHz; regenerate them with
``python3 bench/converse.py --make-talk``) on a seeded schedule: a question answered in full, a
follow-up, an interruption that barges in on the answer, repeated. ``duplexcadence demo`` runs
the headless conversation on it; ``bench/converse.py`` and ``bench/soak.py`` use the same talk,
so a demo, a benchmark and a soak hear exactly the same user.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import platformdirs

from app.periods import write_wav

TALK = Path(__file__).resolve().parents[1] / "assets" / "talk"
UTTERANCES = {
    "question": "hello there, could you tell me what the weather will be like tomorrow",
    "followup": "and what should I wear for a walk in the park",
    "interrupt": "no wait, stop, stop talking please",
}
RATE = 16_000


def demo_dir() -> Path:
    """Where ``duplexcadence demo`` writes its input, audio and traces (the user data folder)."""
    return Path(platformdirs.user_data_dir("duplexcadence")) / "demo"


def talk(seconds: int, seed: int = 0) -> np.ndarray:
    """``seconds`` s of the user's side at 16 kHz: the seeded schedule over the utterances."""
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
    rng = np.random.default_rng(seed)
    parts, total = [np.zeros(RATE // 2, np.float32)], RATE // 2
    while total < seconds * RATE:
        # An answer of at most 8 s ends before the next question; the follow-up is cut short.
        for name, gap in (("question", 9.5), ("followup", 2.0), ("interrupt", 3.0)):
            pause = np.zeros(round((gap + rng.uniform(0, 1)) * RATE), np.float32)
            parts += [clips[name], pause]
            total += clips[name].size + pause.size
    return np.concatenate(parts)[: seconds * RATE]


def talk_periods(periods: int, seed: int = 0) -> list[np.ndarray]:
    """The talk cut into ``periods`` one-second periods."""
    audio = talk(periods, seed)
    return [audio[k * RATE : (k + 1) * RATE].copy() for k in range(periods)]


def write_talk(path: Path, seconds: int, seed: int = 0) -> Path:
    """The talk as a 16-bit WAV at ``path`` (its folder created; written atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_wav(path, talk(seconds, seed), RATE)

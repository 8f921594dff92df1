"""A spoken question set for the basic voice: everyday questions, each with the words a right
answer must contain, spoken by several espeak-ng voices at several speeds, some over noise.

Held out: models, prompts and the segment padding are chosen on the ``dev`` half; the ``test``
half is only reported (``bench/basic_cpu.py``) and sampled by CI (``tests/test_basic_voice.py``).
The split, voice, speed and noise of a question follow from its place in :data:`QUESTIONS`
(never chosen question by question).

    for q in QUESTIONS: q.talk(lead_s=1.0).audio   # float32 16 kHz, the question after 1 s
    q.correct("A spider has eight legs.")          # True
    word_error_rate(["what is two plus two"], ["What is 2 plus 2?"])   # 0.0
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import jiwer
import numpy as np

from tests.speech import Conversation, conversation

__all__ = [
    "QUESTIONS",
    "Question",
    "normalize",
    "split",
    "whisper_word_error_rate",
    "word_error_rate",
]

# (question, words any one of which a right answer contains): plain facts a small model can know
_ASKED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("What is the capital of France?", ("paris",)),
    ("How many legs does a spider have?", ("eight", "8")),
    ("What color is the sky on a clear day?", ("blue",)),
    ("How many days are there in a week?", ("seven", "7")),
    ("What is the capital of Japan?", ("tokyo",)),
    ("What is two plus two?", ("four", "4")),
    ("How many hours are there in a day?", ("twenty-four", "twenty four", "24")),
    ("What do bees make?", ("honey",)),
    ("What is the largest planet in our solar system?", ("jupiter",)),
    ("At what temperature in Celsius does water freeze?", ("zero", "0")),
    ("Which animal is called the king of the jungle?", ("lion", "lions")),
    ("What color is a ripe banana?", ("yellow",)),
    ("How many months are there in a year?", ("twelve", "12")),
    ("What is the opposite of hot?", ("cold",)),
    ("Who wrote Romeo and Juliet?", ("shakespeare",)),
    ("What is the capital of Italy?", ("rome",)),
    ("How many continents are there?", ("seven", "7")),
    ("What planet do we live on?", ("earth",)),
    ("What is the largest ocean on Earth?", ("pacific",)),
    ("What do we call frozen water?", ("ice",)),
    ("How many sides does a triangle have?", ("three", "3")),
    ("What color is fresh grass?", ("green",)),
    ("What is the capital of England?", ("london",)),
    ("What language do people speak in Spain?", ("spanish",)),
    ("Which star is closest to the Earth?", ("sun",)),
    ("What does a caterpillar turn into?", ("butterfly", "butterflies", "moth")),
    ("How many minutes are there in an hour?", ("sixty", "60")),
    ("What is the tallest animal in the world?", ("giraffe", "giraffes")),
    ("What is the capital of Germany?", ("berlin",)),
    ("What do you call a baby dog?", ("puppy", "puppies", "pup")),
    ("How many wheels does a bicycle have?", ("two", "2")),
    ("What color is snow?", ("white",)),
    ("Which animal gives us milk?", ("cow", "cows", "goat", "goats")),
    ("What is the biggest animal in the world?", ("whale", "whales")),
    ("How many legs does a dog have?", ("four", "4")),
    ("What do plants need from the sun to grow?", ("light", "sunlight", "energy")),
    ("Where do penguins live?", ("antarctica", "antarctic", "south pole", "southern")),
    ("Which fruit is red and keeps the doctor away?", ("apple", "apples")),
    ("What is the main ingredient of bread?", ("flour", "wheat")),
    ("What do you use to write on a blackboard?", ("chalk",)),
)

# How each question is spoken, by its place: voice, words per minute, and every fourth over
# white noise at 20 dB SNR (seeded by its place).
VOICES = ("en-us", "en", "en-us+f3", "en+m3", "en-gb-x-rp")
SPEEDS = (150, 170, 190, 160)
SNR_DB = 20.0


@dataclass(frozen=True)
class Question:
    """One spoken question and what its answer must say."""

    index: int
    text: str
    answers: tuple[str, ...]  # a right answer contains one of these (whole words, any case)
    voice: str  # espeak-ng voice (with +variant)
    speed: int  # words per minute
    snr_db: float | None  # white noise under the whole conversation, None: clean
    split: str  # "dev" (choose on it) or "test" (report it)

    def talk(self, lead_s: float, tail_s: float = 0.0) -> Conversation:
        """The question spoken after ``lead_s`` of silence (noise too, when noisy)."""
        clean = conversation([lead_s, self.text, tail_s], voice=self.voice, speed=self.speed)
        if self.snr_db is None:
            return clean
        start, end = (round(s * clean.rate) for s in clean.speech[0])
        power = float(np.mean(clean.audio[start:end] ** 2))
        noise = np.random.default_rng(self.index).standard_normal(clean.audio.size)
        scale = np.sqrt(power / 10 ** (self.snr_db / 10))
        return replace(clean, audio=(clean.audio + scale * noise).astype(np.float32))

    def correct(self, reply: str) -> bool:
        """True when ``reply`` contains one of the answer words."""
        said = f" {normalize(reply)} "
        return any(f" {normalize(word)} " in said for word in self.answers)


QUESTIONS: tuple[Question, ...] = tuple(
    Question(
        index=i,
        text=text,
        answers=answers,
        voice=VOICES[i % len(VOICES)],
        speed=SPEEDS[i % len(SPEEDS)],
        snr_db=SNR_DB if i % 4 == 3 else None,
        split="dev" if i % 2 == 0 else "test",
    )
    for i, (text, answers) in enumerate(_ASKED)
)

_NUMBERS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
_DIGITS = re.compile(r"\b(\d{1,2})\b")


def _spell(match: re.Match[str]) -> str:
    n = int(match.group(1))
    return _NUMBERS[n] if n < len(_NUMBERS) else match.group(1)


def normalize(text: str) -> str:
    """Lower case, small numbers as words, no punctuation (hyphens are spaces): for WER."""
    spelled = _DIGITS.sub(_spell, text.lower())
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", spelled.replace("-", " ")).split())


def word_error_rate(truths: Sequence[str], heard: Sequence[str]) -> float:
    """Corpus word error rate of ``heard`` against ``truths`` (both normalized)."""
    return float(jiwer.wer([normalize(t) for t in truths], [normalize(h) or "-" for h in heard]))


def whisper_word_error_rate(truths: Sequence[str], heard: Sequence[str]) -> float:
    """Corpus word error rate after Whisper's own English normalizer (transformers' copy of
    ``EnglishTextNormalizer``: numbers as digits, "plus" as "+", contractions and titles spelled
    out), without its British-to-American spelling table (a file of Whisper's Hub repository, not
    in any installed package). Beside :func:`word_error_rate` for comparison with published
    figures; the set's own bound stays the latter's."""
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    standard = EnglishTextNormalizer({})
    return float(jiwer.wer([standard(t) for t in truths], [standard(h) or "-" for h in heard]))


def split(name: str) -> tuple[Question, ...]:
    """The questions of one split ("dev" or "test"), or all of them ("all")."""
    if name == "all":
        return QUESTIONS
    if name not in ("dev", "test"):
        raise ValueError(f"split {name!r}: choose dev, test or all")
    return tuple(q for q in QUESTIONS if q.split == name)

"""The basic family end to end with its real models: a spoken question gets a spoken answer.

The models load once per module (~25 s on two idle cores, 75 s on a busy one), and once more
for the ``converse`` run. The questions are espeak-ng speech from the spoken question set
(``tests/basic_questions.py``), heard in real time (``bench/basic_cpu.py``'s ``ask``), or from a
file on a simulated clock (``converse --headless``). No model samples and ``ask``
starts a fresh conversation (so the cut depends on the audio alone): a run is reproducible. The
sample is every other held-out question, by place, with bounds on its word error rate and its
right answers taken from the whole set's measured figures, never tuned question by question.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from adapters.basic.cascade import BasicCascade
from adapters.basic.family import PERIOD_S
from adapters.basic.load import load_basic
from adapters.basic.shipped import check_installed
from app.converse import ConverseRequest, converse
from app.settings import Settings
from bench.basic_cpu import LEAD_S, ask, transcribe_answer
from tests.basic_questions import normalize, split, word_error_rate
from tests.speech import conversation

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cascade() -> Iterator[BasicCascade]:
    try:
        check_installed()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    built = load_basic(period_s=PERIOD_S)  # the family's
    yield built
    built.close()


# Every other held-out question, by place (never picked one by one). Bounds from the measured
# figures (bench/results/basic_cpu.json, 2026-12-02 07:26 UTC, the reply model on its 4-bit
# blocks): the whole set's WER was 14.4% (this sample's 7.5%, as at 04:07 and 06:35) and this
# sample had 5 of 10 answers right (6 on float32 at 06:35: "What color is fresh grass?" is now
# answered "light blue"; the whole held-out half is 9 of 20 either way); room for one more miss,
# as before. The words heard and the answers depend on the final cut alone (no model samples;
# a speculative recognition dropped when the user went on is never shown), so on the audio.
SAMPLE = split("test")[::2]
MAX_WER = 0.20
MIN_RIGHT = 4


def test_held_out_questions_are_heard_and_answered(cascade: BasicCascade) -> None:
    turns = [ask(cascade, question) for question in SAMPLE]
    report = [f"{t.question!r} heard {t.heard!r} -> {t.said!r}" for t in turns]
    wer = word_error_rate([q.text for q in SAMPLE], [t.heard for t in turns])
    right = sum(q.correct(t.said) for q, t in zip(SAMPLE, turns, strict=True))
    assert wer <= MAX_WER, report
    assert right >= MIN_RIGHT, report
    assert all(t.latency_s is not None and t.answer_s > 0.3 for t in turns), report
    spoken = turns[0]  # the answer's audio says what its text says
    assert normalize(spoken.said).split()[0] in normalize(transcribe_answer(cascade, spoken))


class _Recording:
    """A recognizer that keeps what it is handed and hears nothing (the turn ends silent)."""

    rate = 16000

    def __init__(self) -> None:
        self.cuts: list[np.ndarray] = []

    def transcribe(self, audio: np.ndarray, cancelled: threading.Event | None = None) -> str:
        self.cuts.append(audio)
        return ""


class _Silent:
    def reply(self, question: str, say: Callable[[str], None], cancelled: threading.Event) -> str:
        return ""


def _heard(cascade: BasicCascade, audio: np.ndarray) -> str:
    """``audio`` to a fresh conversation, then silence until the turn ends: what was heard."""
    cascade.reset()
    n = cascade.input_samples
    audio = np.concatenate([audio, np.zeros(-audio.size % n, dtype=np.float32)])
    periods = [audio[i : i + n] for i in range(0, audio.size, n)]
    heard = []
    for k in range(400):
        step = cascade.step(periods[k] if k < len(periods) else np.zeros(n, dtype=np.float32))
        heard.append(step.heard)
        if step.turn_end:
            return " ".join(h for h in heard if h)
    raise AssertionError("the turn did not end")


def test_the_speculative_words_are_the_words_of_the_cut_at_the_take(
    cascade: BasicCascade,
) -> None:
    """The answer begun at the first silent window (speculatively) is the answer: the words it
    heard are Whisper's words for the cut that a job begun only at the take gets from the same
    audio; for a question with a pause inside it too, where the first job is discarded."""
    talks = [
        SAMPLE[0].talk(LEAD_S, 0.2).audio,
        conversation([LEAD_S, "What is the capital", 0.3, "of Germany?", 0.2]).audio,
    ]
    late = _Recording()
    at_take = BasicCascade(
        late, _Silent(), cascade.voice, PERIOD_S, realtime=False, speculate=False
    )
    was = cascade.realtime
    cascade.realtime = False  # a simulated clock: steps wait for the answer
    try:
        for talk in talks:
            heard = _heard(cascade, talk)
            assert (cascade.speculation.hits, cascade.speculation.at_take) == (1, 0)
            late.cuts.clear()
            _heard(at_take, talk)
            assert len(late.cuts) == 1 and at_take.speculation.at_take == 1
            assert heard and cascade.recognizer.transcribe(late.cuts[0]) == heard
        assert cascade.speculation.discards >= 1  # the pause inside the second question
    finally:
        cascade.realtime = was
        at_take.close()


def test_converse_headless_answers_a_spoken_question(cascade: BasicCascade, tmp_path: Path) -> None:
    """The app's loop on files (a simulated clock: the cascade waits for its answers): what the
    cascade heard and said reaches the summary, the trace and the output file. Whether it hears
    and answers right is the held-out sample's test above (Whisper base hears this question as
    "... the Rifle Tower?", where tiny.en, for which it was picked, heard it right)."""
    question = conversation([LEAD_S, "Where is the Eiffel Tower?", 1.0]).write(tmp_path / "q.wav")
    summary = converse(
        ConverseRequest(
            settings=Settings(family="basic", device="cpu"),
            input=question,
            output=tmp_path / "a.wav",
            trace=tmp_path / "t.json",
            progress=False,
        )
    )
    assert "tower" in summary["heard"].lower() and summary["said"].strip(), summary
    answer, rate = sf.read(tmp_path / "a.wav", dtype="float32")
    heard = set(
        normalize(cascade.recognizer.transcribe(soxr.resample(answer, rate, 16000))).split()
    )
    assert heard & set(normalize(summary["said"]).split()), (heard, summary["said"])
    records = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    question_heard = " ".join(r["loop"].get("heard", "") for r in records if "loop" in r)
    assert question_heard.strip() == summary["heard"].strip(), question_heard

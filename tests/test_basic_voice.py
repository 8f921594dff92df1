"""The basic family end to end with its real models: a spoken question gets a spoken answer.

The models load once per module (~25 s on two idle cores, more on a busy one). The question is
espeak-ng speech heard in real time (``bench/basic_cpu.py``'s ``ask``); the answer's audio goes
through the same recognizer, and only words a correct answer cannot avoid are asserted.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.basic import BasicCascade, load_basic
from adapters.basic.shipped import check_installed
from bench.basic_cpu import ask, transcribe_answer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cascade() -> Iterator[BasicCascade]:
    try:
        check_installed()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    built = load_basic(period_s=0.5)
    yield built
    built.close()


def test_a_spoken_question_gets_a_spoken_relevant_answer(cascade: BasicCascade) -> None:
    turn = ask(cascade, "What is the capital of France?")
    heard = turn.heard.lower()
    assert "capital" in heard and "france" in heard, turn.heard
    assert "paris" in turn.said.lower(), turn.said
    assert turn.latency_s is not None and turn.answer_s > 0.5
    assert "paris" in transcribe_answer(cascade, turn).lower()


def test_the_next_question_is_answered_too(cascade: BasicCascade) -> None:
    turn = ask(cascade, "How many legs does a spider have?")
    assert "spider" in turn.heard.lower(), turn.heard
    assert turn.said and turn.answer_s > 0.5
    assert "spider" in transcribe_answer(cascade, turn).lower() or "legs" in turn.said.lower()

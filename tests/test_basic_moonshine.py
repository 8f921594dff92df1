"""The screened Moonshine recognizer (``bench/basic_moonshine.py``): its token table, and one
spoken question heard when ``moonshine-cpp`` is installed (it is no project dependency)."""

from __future__ import annotations

import importlib.util

import pytest

from bench.basic_moonshine import PACKAGE, MoonshineRecognizer, token_table
from tests.basic_questions import QUESTIONS, word_error_rate


def test_the_token_table_is_length_prefixed_bytes() -> None:
    data = bytes([5]) + b"<unk>" + bytes([3]) + b"<s>" + bytes([1]) + b"\x00" + bytes([0])
    assert token_table(data) == [b"<unk>", b"<s>", b"\x00", b""]


@pytest.mark.slow
def test_it_hears_a_spoken_question() -> None:
    if importlib.util.find_spec(PACKAGE) is None:
        pytest.skip("moonshine-cpp is not installed (screening only)")
    question = QUESTIONS[0]  # "What is the capital of France?", espeak-ng en-us at 150 wpm
    heard = MoonshineRecognizer(1).transcribe(question.talk(lead_s=0.2, tail_s=0.2).audio)
    assert word_error_rate([question.text], [heard]) <= 1 / 6, heard

"""The spoken question set's word error rates: the set's own normalizer and Whisper's."""

from __future__ import annotations

import pytest

from tests.basic_questions import whisper_word_error_rate, word_error_rate


def test_both_normalizers_forgive_case_punctuation_and_spelled_numbers() -> None:
    pytest.importorskip("transformers")
    truth, heard = ["What is two plus two?"], ["what is 2 plus 2"]
    assert word_error_rate(truth, heard) == 0.0
    assert whisper_word_error_rate(truth, heard) == 0.0


def test_a_misheard_word_counts_once() -> None:
    pytest.importorskip("transformers")
    truth, heard = ["What is the capital of France?"], ["What is the capital on France?"]
    assert word_error_rate(truth, heard) == pytest.approx(1 / 6)
    assert whisper_word_error_rate(truth, heard) == pytest.approx(1 / 6)
    assert whisper_word_error_rate(truth, [""]) == 1.0  # nothing heard: every word missed

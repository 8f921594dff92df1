"""How a streamed reply is cut into clauses for the voice (no model: text fed as it decodes)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from adapters.basic.reply import _Clauses


def clauses(chunks: list[str], max_sentences: int = 2) -> list[str]:
    said: list[str] = []
    streamer = _Clauses(None, said.append, max_sentences, first_words=3, first_most=6)
    for chunk in chunks:
        streamer.on_finalized_text(chunk)
    streamer.on_finalized_text("", stream_end=True)
    return said


def test_the_first_clause_goes_early_then_whole_sentences():
    reply = "The answer to this classic question lies in its anatomy. It has eight. Or nine."
    assert clauses([reply[i : i + 3] for i in range(0, len(reply), 3)]) == [
        "The answer to this classic question",  # six words, no punctuation yet
        "lies in its anatomy.",
        "It has eight.",
    ]
    assert clauses(["The capital of France is ", "Paris, a city. ", "Yes."]) == [
        "The capital of France is Paris,",  # punctuation after three words or more
        "a city.",
        "Yes.",
    ]


def test_a_short_first_sentence_is_said_as_it_ends():
    assert clauses(["No, no, ", "no. ", "A joke is ", "funny. ", "Really."]) == [
        "No, no, no.",
        "A joke is funny.",
    ]


def test_markup_is_not_spoken_and_the_tail_is_said_at_the_end():
    assert clauses(["**Hello** there"]) == ["Hello there"]


def test_a_title_does_not_end_a_sentence():
    assert clauses(["I'm Dr. Elena, ", "a helper. ", "Hi. ", "Bye."]) == [
        "I'm Dr. Elena,",
        "a helper.",
        "Hi.",
    ]


def first_clauses(reply: str) -> list[str]:
    """The shipped cut (four words, or a few more while the phrase hangs), ``reply`` streamed a
    word at a time as the model's tokens come."""
    said: list[str] = []
    streamer = _Clauses(None, said.append, 2, first_words=3, first_most=4)
    for word in reply.split():
        streamer.on_finalized_text(f" {word}")
    streamer.on_finalized_text("", stream_end=True)
    return said


def test_the_first_clause_is_four_words_unless_the_phrase_hangs():
    assert first_clauses("The capital of France is Paris. It is big. Yes.") == [
        "The capital of France",
        "is Paris.",
        "It is big.",
    ]
    assert first_clauses("The sky on a clear day is blue.")[0] == "The sky on a clear"
    assert first_clauses("The largest planet in our solar system is Jupiter.") == [
        "The largest planet in our solar",  # "in", "our": hanging, so two more
        "system is Jupiter.",
    ]
    # at most three words past the four, however it hangs
    assert first_clauses("one two three of a the an b c.")[0] == "one two three of a the an"
    assert first_clauses("A day is long. Yes.") == ["A day is long.", "Yes."]  # ended first

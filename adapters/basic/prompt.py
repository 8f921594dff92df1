"""The chat the basic voice's reply model continues: a system prompt and worked turns.

Torch-free, so the screening bench (``bench/basic_screen.py``) compares candidates against it
without loading a model. None of the spoken question set's questions
(``tests/basic_questions.py``) is among the worked turns.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PROMPT", "SHOTS", "SYSTEM", "chat"]

Chat = tuple[dict[str, str], ...]

SYSTEM = (
    "You are a friendly voice assistant. Answer every question in one short, correct sentence "
    "that states the answer plainly."
)

# Worked turns, which a 135M model follows far better than instructions alone.
SHOTS: tuple[tuple[str, str], ...] = (
    ("What is the capital of Spain?", "The capital of Spain is Madrid."),
    ("How many legs does a cat have?", "A cat has four legs."),
    ("Can you suggest something to drink?", "Try a glass of cold lemonade."),
)


def chat(system: str, shots: Sequence[tuple[str, str]]) -> Chat:
    """``system`` as the system turn, then each (question, answer) as a user and an
    assistant turn."""
    turns = [{"role": "system", "content": system}]
    for user, assistant in shots:
        turns += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return tuple(turns)


PROMPT: Chat = chat(SYSTEM, SHOTS)

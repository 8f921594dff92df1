"""The basic voice's reply model on its prefix cache equals the whole chat prefilled at once.

:class:`adapters.basic.reply.Replier` computes the prompt's keys and values once, at load, and
each turn prefills only its question past them (adapters/basic/decode.py's lean forward, whose
operations are transformers' own: ``tests/test_basic_decode.py``). The real model
(SmolLM2-135M-Instruct from its wheel) as shipped, its Linear layers on the file's 4-bit blocks
(adapters/basic/fourbit.py), greedy, 8 new tokens: the ids and every step's logits on the cache
equal, with ``torch.equal``, those of a prefill of the whole chat; the whole prefill is first
shown to repeat itself, and the prompt's rows are shown unchanged by the turns that wrote past
them, and a question too long for the cache's room gets a larger one that equals the whole
prefill too; a chat without the prompt is prefilled whole and counted. Three held-out questions, by
place. Eight tokens: what the cache can change is the question's prefill (rows beside the
prompt's, or after them) and the steps that attend to the prompt's keys and values, which every
new token does; the first step's logits come from the prefill, the other seven from one-row
passes over the cache.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.basic.shipped import check_installed
from bench.basic_decode import steps
from tests.basic_questions import split

pytestmark = pytest.mark.slow


def _generate(replier: Any, question: str, cached: bool) -> Any:
    ids = replier._ids(replier._messages(question), add_generation_prompt=True)
    cache = replier.prefilled(ids) if cached else replier._lean.keys(ids.shape[1] + 8)
    return steps(replier, ids, cache, 8)


def test_the_prefix_cache_gives_the_whole_prefill_bit_for_bit() -> None:
    try:
        check_installed()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    import torch

    from adapters.basic.reply import Replier

    torch.set_num_threads(1)  # as load_basic sets it
    replier = Replier()
    assert replier.weights == "four_bit"  # the shipped path, on the CPU
    assert replier.float32 == {"the output layer (tied to the embedding, Q8_0 in the file)": 1}
    size = replier._prefix.shape[1]
    keys = [layer[:, :, :size].clone() for layer in replier._cache.keys]
    for question in split("test")[:3]:
        eager = _generate(replier, question.text, cached=False)
        again = _generate(replier, question.text, cached=False)
        cached = _generate(replier, question.text, cached=True)
        assert eager[0] == again[0]
        assert all(torch.equal(a, b) for a, b in zip(eager[1], again[1], strict=True))
        assert cached[0] == eager[0], question.text
        assert len(cached[1]) == len(eager[1]) == 8
        assert all(torch.equal(a, b) for a, b in zip(cached[1], eager[1], strict=True))
    after = [layer[:, :, :size] for layer in replier._cache.keys]
    assert all(torch.equal(a, b) for a, b in zip(keys, after, strict=True))
    assert replier.uncached == {}
    # a chat that does not begin with the prompt is prefilled whole, and counted
    ids = replier._ids([{"role": "user", "content": "Hi."}], add_generation_prompt=True)
    assert replier.prefilled(ids) is None
    assert replier.uncached == {"the chat's tokens do not begin with the prompt's": 1}
    # a long question outgrows the cache's room: a larger one, the prompt's rows copied
    room = replier._cache.room
    ids = replier._ids(replier._messages("Why is the sky blue? " * 50), add_generation_prompt=True)
    assert ids.shape[1] + replier.max_new_tokens > room
    cached = steps(replier, ids, replier.prefilled(ids), 2)
    assert replier._cache.room > room
    whole = steps(replier, ids, replier._lean.keys(ids.shape[1] + 2), 2)
    assert cached[0] == whole[0]
    assert all(torch.equal(a, b) for a, b in zip(cached[1], whole[1], strict=True))

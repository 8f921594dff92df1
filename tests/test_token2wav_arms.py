"""Every arm of the Token2Wav flow stream equals eager bit for bit, switched between calls too.

A small flow (``tests/token2wav_small.py``) with seeded random weights streams steady 28-token
windows, flush-sized calls, last chunks and turn resets; every arm's mel and its retained state
(in the stock representation) must equal the eager stream's with ``torch.equal``. On CPU the
replay engine makes and counts every admission decision without launching graphs.
"""

from __future__ import annotations

import random

import pytest
import torch

from engine.arms import ARMS, Arm
from engine.replay import ReplayEngine
from tests.token2wav_small import make_stream, random_voice, small_flow, token_calls

PATTERN: list[int | str] = [
    28,
    28,
    28,
    28,
    13,
    "last:4",
    "reset",
    28,
    28,
    "last:10",
    "reset",
    28,
    28,
    28,
    28,
]


def same_state(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def flow():
    return small_flow(seed=1)


@pytest.mark.parametrize("arm", ARMS[1:], ids=str)
def test_arm_equals_eager_on_every_call(flow, arm: Arm) -> None:
    voice = random_voice(prompt_tokens=12, seed=2)
    engine = ReplayEngine("cpu")
    eager = make_stream(flow, voice, Arm.EAGER, ReplayEngine("cpu", enabled=False))
    stream = make_stream(flow, voice, arm, engine)
    exact = 0
    calls = token_calls(PATTERN, seed=3)
    for tokens, last in calls:
        if tokens is None:
            eager.reset()
            stream.reset()
            continue
        same = torch.equal(eager.chunk(tokens, last), stream.chunk(tokens, last))
        exact += same and same_state(eager.stock_state(), stream.stock_state())
    assert exact == sum(t is not None for t, _ in calls)
    if arm.replay:
        total = engine.snapshot()["total"]
        assert total["hits"] > 0 and total["invalidations"] == 0, total


def test_switching_arm_between_calls_stays_exact(flow) -> None:
    voice = random_voice(prompt_tokens=10, seed=4)
    eager = make_stream(flow, voice, Arm.EAGER, ReplayEngine("cpu", enabled=False))
    stream = make_stream(flow, voice, Arm.SRC, ReplayEngine("cpu"))
    rng = random.Random(5)
    calls = token_calls(PATTERN * 2, seed=6)
    for tokens, last in calls:
        if tokens is None:
            eager.reset()
            stream.reset()
            continue
        stream.set_arm(rng.choice(ARMS))
        assert torch.equal(eager.chunk(tokens, last), stream.chunk(tokens, last)), stream.arm
        assert same_state(eager.stock_state(), stream.stock_state()), stream.arm


def test_state_rule_keeps_one_address_across_turns(flow) -> None:
    voice = random_voice(prompt_tokens=10, seed=7)
    stream = make_stream(flow, voice, Arm.S, ReplayEngine("cpu"))
    ptr, cnn_ptr = stream.carry.data_ptr(), stream.cnn_region.data_ptr()
    for tokens, last in token_calls(PATTERN, seed=8):
        if tokens is None:
            stream.reset()
        else:
            stream.chunk(tokens, last)
        assert stream.carry.data_ptr() == ptr and stream.cnn_region.data_ptr() == cnn_ptr
    assert stream.carry.capacity == voice.frames + 100 + 56


@pytest.mark.parametrize("arm", [Arm.S, Arm.SR, Arm.SRC], ids=str)
def test_flow_without_the_stock_envelope_runs_the_state_rule_exactly(flow, arm: Arm) -> None:
    """A flow built with ``envelope=False`` (no 16 × 1000 buffers at all) sets its prompt state
    up straight into the carry and equals the stock stream of the same weights on every call."""
    lean = small_flow(seed=1, envelope=False)
    assert lean.decoder.att_cache_buffer.numel() == 0
    voice = random_voice(prompt_tokens=11, seed=9)
    eager = make_stream(flow, voice, Arm.EAGER, ReplayEngine("cpu", enabled=False))
    stream = make_stream(lean, voice, arm, ReplayEngine("cpu"))
    for tokens, last in token_calls(PATTERN, seed=10):
        if tokens is None:
            eager.reset()
            stream.reset()
            continue
        assert torch.equal(eager.chunk(tokens, last), stream.chunk(tokens, last))
        assert same_state(eager.stock_state(), stream.stock_state())
    with pytest.raises(ValueError, match="envelope=True"):
        stream.set_arm(Arm.EAGER)


@pytest.mark.parametrize("arm", ARMS, ids=str)
def test_every_arm_runs_under_inference_mode_as_the_vendor_does(flow, arm: Arm) -> None:
    """The vendor decorates ``inference_chunk`` with ``torch.inference_mode``; under plain
    ``no_grad`` every operator also pays autograd's view and version bookkeeping on the host,
    which made the state rule ~3% slower than eager on a launch-bound GPU. Every arm's mel is
    therefore an inference tensor, and the regions the stream updates in place stay ordinary
    tensors (a reset outside inference mode may write them)."""
    voice = random_voice(prompt_tokens=10, seed=7)
    stream = make_stream(flow, voice, arm, ReplayEngine("cpu", enabled=arm.replay))
    for tokens, last in token_calls(PATTERN, seed=8):
        if tokens is None:
            stream.reset()
            continue
        assert stream.chunk(tokens, last).is_inference()
    assert not stream.carry.buffer.is_inference() and not stream.cnn_region.is_inference()

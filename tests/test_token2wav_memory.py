"""The eager stream holds and peaks at what the vendor's stream does, nothing more.

bench/token2wav.py compares every arm's peak with the vendor's eager peak; the comparison is like
for like only if our eager path holds what the vendor's holds. Counted with :class:`LiveBytes`
on the small flow (the tensors' bytes, as the CUDA allocator counts them):

- an eager :class:`FlowStream` holds exactly the stock stream's state (the prompt state and the
  live state), and building it peaks no higher: the state rule's regions (carry, conv region)
  are made only when an arm switch first needs them, and the replay catalogs are shapes only;
- a stock chunk peaks no higher than the vendor's own loop on the same flow (``mel, cache =
  inference_chunk(...)`` then the trims): the previous state is dropped before the trims
  allocate, not held beside the new one to the end of the call.
"""

from __future__ import annotations

import pytest
import torch

from adapters.token2wav.binding import bind_flow
from adapters.token2wav.stock import StockStream, trim_conformer_cache
from engine.arms import Arm
from engine.replay import ReplayEngine
from tests.live_bytes import LiveBytes
from tests.token2wav_small import make_stream, random_voice, small_flow, token_calls

STEPS = 2
TURN: list[int | str] = [28, 28, 28, 28, 28, "reset", 28, 28, 28, 28]


def _bind(voice):  # type: ignore[no-untyped-def]
    return bind_flow("minicpmo45", voice.frames, STEPS)


@pytest.fixture(scope="module")
def flow():
    return small_flow(seed=1)


def test_eager_flow_stream_holds_the_stock_state_only(flow) -> None:
    voice = random_voice(prompt_tokens=12, seed=2)
    with LiveBytes() as stock_live:
        stock = StockStream(flow, voice.tokens, voice.mel, voice.spk, binding=_bind(voice))
    with LiveBytes() as eager_live:
        eager = make_stream(flow, voice, Arm.EAGER, ReplayEngine("cpu", enabled=False), STEPS)
    assert eager_live.current == stock_live.current
    assert eager_live.peak == stock_live.peak
    assert stock is not None and eager is not None  # held until measured


def test_switching_into_the_state_rule_makes_the_regions_once(flow) -> None:
    voice = random_voice(prompt_tokens=12, seed=4)
    reference = make_stream(flow, voice, Arm.EAGER, ReplayEngine("cpu", enabled=False), STEPS)
    stream = make_stream(flow, voice, Arm.EAGER, ReplayEngine("cpu"), STEPS)
    arms = [Arm.EAGER, Arm.S, Arm.R, Arm.SRC, Arm.EAGER, Arm.SR, Arm.S, Arm.RC, Arm.SRC, Arm.EAGER]
    address = None
    calls = token_calls(TURN, seed=5)
    for arm, (tokens, last) in zip(arms, calls, strict=True):
        if tokens is None:
            reference.reset()
            stream.reset()
            continue
        stream.set_arm(arm)
        assert torch.equal(reference.chunk(tokens, last), stream.chunk(tokens, last))
        if arm.state_rule:
            address = address or stream.carry.data_ptr()
            assert stream.carry.data_ptr() == address


def test_stock_chunk_peaks_no_higher_than_the_vendor_loop(flow) -> None:
    voice = random_voice(prompt_tokens=12, seed=6)
    calls = [tokens for tokens, _ in token_calls(TURN, seed=7) if tokens is not None]
    binding = _bind(voice)
    stock = StockStream(flow, voice.tokens, voice.mel, voice.spk, binding=binding)
    prompt, depth = stock.prompt_state, len(flow.encoder.encoders)

    def vendor_loop() -> int:
        """minicpmo-utils 1.0.7's ``Token2wav.stream`` cache handling, on our flow."""
        state = {key: value.clone() for key, value in prompt.items()}
        with LiveBytes() as live:
            for tokens in calls:
                _, state = flow.inference_chunk(tokens, voice.spk, state, False, STEPS)
                att = state["estimator_att_cache"]
                state["estimator_att_cache"] = binding.carry.apply(att)
                conformer = state["conformer_att_cache"]
                state["conformer_att_cache"] = trim_conformer_cache(
                    conformer, binding.conformer, depth
                )
        return live.peak

    def ours() -> int:
        stock.reset()
        with LiveBytes() as live:
            for tokens in calls:
                stock.chunk(tokens)
        return live.peak

    assert ours() <= vendor_loop()

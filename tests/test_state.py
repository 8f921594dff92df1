"""Prompt-only state: shared copy-on-write by every carry, never written (paper §2.2).

Tiny shapes along the paper's clock geometry (P=302, 100 retained, 50-frame calls); runs in
about a second on CPU.
"""

from __future__ import annotations

import pytest
import torch

from engine.contract import Order
from engine.state import PromptState, region_bytes

P, HISTORY, CALL = 302, 100, 50


def prompt_state(seed: int = 0) -> PromptState:
    gen = torch.Generator().manual_seed(seed)
    return PromptState(
        {
            "estimator_att": torch.randn(2, 1, P, 4, generator=gen),
            "conformer_att": torch.randn(3, P, 2, generator=gen).to(torch.bfloat16),
        }
    )


def test_region_bytes() -> None:
    # The paper's 10x458 estimator carry: steps x layers x (k, v) x heads x frames x head_dim.
    assert region_bytes((10, 16, 2, 8, 458, 128), torch.float32) == 10 * 16 * 2 * 8 * 458 * 128 * 4
    assert region_bytes((3, 0, 5), torch.bfloat16) == 0
    assert region_bytes((), torch.float64) == 8
    with pytest.raises(ValueError, match="negative"):
        region_bytes((2, -1), torch.float32)


def test_prompt_state_is_frozen_and_owns_a_copy() -> None:
    source = torch.randn(2, 3)
    state = PromptState({"a": source})
    assert state["a"].data_ptr() != source.data_ptr(), "copy=True must decouple from the source"
    source.add_(1)  # a vendor module overwriting its stream cache buffer
    assert not torch.equal(state["a"], source)
    assert PromptState({"a": source}, copy=False)["a"].data_ptr() == source.data_ptr()
    with pytest.raises(AttributeError, match="immutable"):
        state._tensors = {}
    with pytest.raises(TypeError):
        state._tensors["b"] = source  # type: ignore[index]
    with pytest.raises(KeyError, match="has no tensor 'b'"):
        state["b"]
    assert list(state) == ["a"] and len(state) == 1 and state.nbytes == 24


def test_fingerprint_detects_a_write() -> None:
    state = prompt_state()
    before = state.fingerprint()
    assert prompt_state().fingerprint() == before, "same values, same fingerprint"
    state["conformer_att"][0, 0, 0] += 1
    assert state.fingerprint() != before


def test_reset_writes_base_in_place_and_shared_state_stays_untouched() -> None:
    """Two carries (sessions) share one prompt state over a long stream with turn resets."""
    state, gen = prompt_state(), torch.Generator().manual_seed(1)
    fingerprint = state.fingerprint()
    carries = [
        state.carry("estimator_att", dim=2, prompt=P, history=HISTORY, order=order, capacity=458)
        for order in (Order.NEWEST_FIRST, Order.OLDEST_FIRST)
    ]
    ptrs = [c.data_ptr() for c in carries]
    for c in carries:
        assert c.base is state["estimator_att"], "carries share the state, no copy"
        assert c.data_ptr() != c.base.data_ptr(), "a carry never aliases the shared state"
    for _turn in range(6):
        for _ in range(5):
            for c in carries:
                c.append(torch.randn(2, 1, CALL, 4, generator=gen))
        for c, ptr in zip(carries, ptrs, strict=True):
            assert c.extent == P + HISTORY
            c.reset()
            assert c.data_ptr() == ptr and c.view().data_ptr() == ptr, "reset must not reallocate"
            assert c.extent == P and torch.equal(c.view(), state["estimator_att"])
    assert state.fingerprint() == fingerprint, "a carry wrote the shared prompt state"

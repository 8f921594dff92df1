"""One ring clock per transformer changes kernels, not bits: the vendor's streaming transformer
with and without it, stepped past its rings' capacity (they wrap), across resets, one and two
steps a call, on both ring paths (masked scatter; ``weights_per_step``'s index copy)."""

from __future__ import annotations

import copy

import pytest
import torch

from adapters.moshi.rings import share_ring_clocks

pytest.importorskip("moshi")


def transformer(weights_per_step: int) -> torch.nn.Module:
    from moshi.modules.transformer import StreamingTransformer

    torch.manual_seed(7)
    per_step = {"weights_per_step": weights_per_step, "gating": "silu"}  # as the depformer
    return StreamingTransformer(
        d_model=32, num_heads=4, num_layers=3, dim_feedforward=64, causal=True,
        context=3 if weights_per_step else 5,  # the rings wrap within a round
        positional_embedding="rope", **(per_step if weights_per_step else {}),
    ).eval()  # fmt: skip


@pytest.mark.parametrize("weights_per_step", [0, 4], ids=["scatter", "index_copy"])
def test_shared_clock_equals_the_vendors_rings(weights_per_step: int) -> None:
    vendor = transformer(weights_per_step)
    ours = copy.deepcopy(vendor)
    g = torch.Generator().manual_seed(3)
    steps = [2, 1, 1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 2, 2, 1] if not weights_per_step else [1] * 4
    rounds = 3 if weights_per_step else 2
    with torch.no_grad(), vendor.streaming(1), ours.streaming(1):
        assert share_ring_clocks(ours) == 2
        for _ in range(rounds):  # a reset between rounds
            for t in steps:
                x = torch.randn((1, t, 32), generator=g)
                assert torch.equal(vendor(x), ours(x))
            vendor.reset_streaming()
            ours.reset_streaming()
        leader, *followers = [layer.self_attn._streaming_state.kv_cache for layer in ours.layers]
        assert all(f.end_offset is leader.end_offset for f in followers)
        for theirs, mine in zip(vendor.layers, ours.layers, strict=True):
            a, b = theirs.self_attn._streaming_state, mine.self_attn._streaming_state
            assert torch.equal(a.kv_cache.cache, b.kv_cache.cache)
            assert torch.equal(a.kv_cache.end_offset, b.kv_cache.end_offset)


def test_rings_that_differ_are_refused() -> None:
    model = transformer(0)
    with torch.no_grad(), model.streaming(1):
        model.layers[1].self_attn._streaming_state.kv_cache.capacity = 9
        with pytest.raises(ValueError, match="capacity"):
            share_ring_clocks(model)

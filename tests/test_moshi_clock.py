"""One clock per transformer changes kernels, not bits: the vendor's streaming transformer with
and without it, stepped past its rings' capacity (they wrap), across resets, one and two steps a
call, on both ring paths (masked scatter; ``weights_per_step``'s index copy), with each rotary
layout (which reads the shared counter in every layer) and none; weights per step applied to a
one-step input without the vendor's one-tensor concatenation (adapters/moshi/one_step.py)."""

from __future__ import annotations

import copy
import weakref

import pytest
import torch

from adapters.moshi.clock import share_clocks
from adapters.moshi.one_step import one_step_layers

pytest.importorskip("moshi")

CASES = {  # as Mimi's transformers (rope), the temporal one (rope, 2 steps a call: prefill-like)
    "scatter-rope": {"context": 5, "positional_embedding": "rope"},
    "scatter-rope_concat": {"context": 5, "positional_embedding": "rope_concat"},
    "index_copy-none": {  # as the depformer: weights per step, no positional embedding
        "context": 3,
        "positional_embedding": "none",
        "weights_per_step": 4,
        "gating": "silu",
    },
    "index_copy-rope": {
        "context": 3,
        "positional_embedding": "rope",
        "weights_per_step": 4,
        "gating": "silu",
    },
}


def transformer(**kwargs: object) -> torch.nn.Module:
    from moshi.modules.transformer import StreamingTransformer

    torch.manual_seed(7)
    return StreamingTransformer(
        d_model=32, num_heads=4, num_layers=3, dim_feedforward=64, causal=True, **kwargs
    ).eval()


@pytest.mark.parametrize("case", CASES)
def test_a_shared_clock_equals_the_vendors_layers(case: str) -> None:
    vendor = transformer(**CASES[case])
    ours = copy.deepcopy(vendor)
    g = torch.Generator().manual_seed(3)
    per_step = "weights_per_step" in CASES[case]
    steps = [1] * 4 if per_step else [2, 1, 1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 2, 2, 1]
    with torch.no_grad(), vendor.streaming(1), ours.streaming(1):
        assert share_clocks(ours) == 2
        assert one_step_layers(ours) == (3 if per_step else 0)  # their feed-forward too
        for _ in range(3 if per_step else 2):  # a reset between rounds
            for t in steps:
                x = torch.randn((1, t, 32), generator=g)
                assert torch.equal(vendor(x), ours(x))
            vendor.reset_streaming()
            ours.reset_streaming()
        leader, *followers = [layer.self_attn._streaming_state for layer in ours.layers]
        assert all(f.kv_cache.end_offset is leader.kv_cache.end_offset for f in followers)
        assert all(f.offset is leader.offset for f in followers)
        for theirs, mine in zip(vendor.layers, ours.layers, strict=True):
            a, b = theirs.self_attn._streaming_state, mine.self_attn._streaming_state
            assert torch.equal(a.kv_cache.cache, b.kv_cache.cache)
            assert torch.equal(a.kv_cache.end_offset, b.kv_cache.end_offset)
            assert torch.equal(a.offset, b.offset) and a.offset_cpu == b.offset_cpu


def test_out_of_streaming_the_vendors_forward_runs() -> None:
    vendor = transformer(**CASES["scatter-rope"])
    ours = copy.deepcopy(vendor)
    with torch.no_grad():
        with ours.streaming(1):
            share_clocks(ours)
        x = torch.randn((1, 6, 32), generator=torch.Generator().manual_seed(5))
        assert torch.equal(vendor(x), ours(x))  # a whole sequence at once, no state


def test_streaming_entered_again_runs_the_vendors_forward() -> None:
    """The vendor's own loop on a model we stepped (the benchmark's peers do so) enters
    ``streaming()`` afresh: its fresh counters are the vendor's, each layer its own, and the
    state we stepped is freed (a 7B's rings are 1.5 GB)."""
    vendor = transformer(**CASES["scatter-rope"])
    ours = copy.deepcopy(vendor)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        with ours.streaming(1):
            share_clocks(ours)
            ours(torch.randn((1, 1, 32), generator=g))
            stepped = weakref.ref(ours.layers[1].self_attn._streaming_state.kv_cache)
        assert stepped() is None
        with vendor.streaming(1), ours.streaming(1):
            for _ in range(7):
                x = torch.randn((1, 1, 32), generator=g)
                assert torch.equal(vendor(x), ours(x))
        with ours.streaming(1):  # installed again: on the vendor's classes, not on ours
            share_clocks(ours)
            assert (
                type(ours.layers[0].self_attn).__mro__[1].__name__ == "StreamingMultiheadAttention"
            )
            ours(torch.randn((1, 1, 32), generator=g))
        with vendor.streaming(1), ours.streaming(1):
            x = torch.randn((1, 1, 32), generator=g)
            assert torch.equal(vendor(x), ours(x))  # no recursion through two clocked classes


def test_layers_that_differ_are_refused() -> None:
    model = transformer(**CASES["scatter-rope"])
    with torch.no_grad(), model.streaming(1):
        model.layers[1].self_attn._streaming_state.kv_cache.capacity = 9
        with pytest.raises(ValueError, match="capacity"):
            share_clocks(model)
        model.layers[1].self_attn._streaming_state.kv_cache.capacity = 5
        model.layers[2].self_attn.context = 4
        with pytest.raises(ValueError, match="context"):
            share_clocks(model)
        untouched = type(model.layers[0].self_attn).__name__
        assert untouched == "StreamingMultiheadAttention"


def test_one_step_layers_keep_to_their_streaming_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed, a one-step call concatenates nothing (projections and feed-forward run the
    step's module on the input); in a fresh ``streaming()`` (the vendor's own loop on the same
    model) every layer runs the vendor's ``apply_weights_per_step`` again."""
    import moshi.modules.transformer as vendor_transformer

    model = transformer(**CASES["index_copy-none"])
    calls: list[int] = []
    vendor_apply = vendor_transformer.apply_weights_per_step

    def counted(*args: object) -> object:
        calls.append(1)
        return vendor_apply(*args)

    monkeypatch.setattr(vendor_transformer, "apply_weights_per_step", counted)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        with model.streaming(1):
            assert share_clocks(model) == 2 and one_step_layers(model) == 3
            model(torch.randn((1, 1, 32), generator=g))
            assert calls == []
        with model.streaming(1):
            model(torch.randn((1, 1, 32), generator=g))
            assert len(calls) == 3 * 3  # each layer: input and output projections, feed-forward

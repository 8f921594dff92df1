"""The ``fused`` backbone kernels on CUDA (Triton through inductor): replay equals eager.

A Qwen3-shaped decoder (4 layers, bf16, seeded random weights; transformers' own modules) over a
KV carry: decode steps and a 10-token feed through the replay engine (one CUDA graph per
signature, the compiled pieces' Triton kernels inside it) equal the same pieces called eagerly,
bit for bit; the fused step launches fewer kernels than the vendor's modules (torch.profiler).
"""

from __future__ import annotations

import functools

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
transformers = pytest.importorskip("transformers")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=1024,
    )  # fmt: skip
    return transformers.Qwen3ForCausalLM(config).eval().to("cuda", torch.bfloat16)


def _run(kernels: str, replay: bool, decode: str = "sdpa") -> list[torch.Tensor]:
    from adapters.minicpmo45.kv import KVCarry
    from adapters.minicpmo45.llm_step import CarryStep
    from engine.replay import ReplayEngine
    from engine.signature import Catalog

    llm = _model()
    step = CarryStep(
        llm.model, 256, "efficient", head=llm.lm_head, kernels=kernels, decode=decode, block=64
    )
    layers, _, heads, capacity, dim = step.carry_shape()
    carry = KVCarry(layers, heads, capacity, dim, dtype=torch.bfloat16, device="cuda")
    op = ReplayEngine("cuda").register(
        "step", step.logits, catalog=Catalog.any(), aliased=["buffer"]
    )
    call = op if replay else step.logits
    g = torch.Generator(device="cuda").manual_seed(1)
    outs = []
    with torch.no_grad():
        x = torch.randn(1, 10, 256, generator=g, device="cuda", dtype=torch.bfloat16)
        pos = torch.arange(10, device="cuda").unsqueeze(0)
        outs += list(call(x, pos, pos[0], carry.buffer, 128))
        for t in range(10, 40):
            x = torch.randn(1, 1, 256, generator=g, device="cuda", dtype=torch.bfloat16)
            pos = torch.tensor([[t]], device="cuda")
            outs += [o.clone() for o in call(x, pos, pos[0], carry.buffer, 128)]
    if replay:
        assert op.counters.to_dict()["hits"] > 0, op.counters.to_dict()
    return outs


@pytest.mark.parametrize(
    ("kernels", "decode"), [("vendor", "sdpa"), ("fused", "sdpa"), ("fused", "flex")]
)
def test_replay_equals_eager(kernels: str, decode: str) -> None:
    """``flex``: each decode step's attention by flex decoding over the whole carry (its Triton
    kernels inside the graph), the 10-token feed by SDPA."""
    eager, replayed = _run(kernels, False, decode), _run(kernels, True, decode)
    assert all(torch.equal(a, b) for a, b in zip(eager, replayed, strict=True))


def test_the_fused_step_launches_fewer_kernels() -> None:
    from torch.profiler import ProfilerActivity, profile

    from adapters.minicpmo45.kv import KVCarry
    from adapters.minicpmo45.llm_step import CarryStep

    counts = {}
    for kernels in ("vendor", "fused"):
        llm = _model()
        step = CarryStep(llm.model, 256, "efficient", head=llm.lm_head, kernels=kernels)
        layers, _, heads, capacity, dim = step.carry_shape()
        carry = KVCarry(layers, heads, capacity, dim, dtype=torch.bfloat16, device="cuda")
        x = torch.randn(1, 1, 256, device="cuda", dtype=torch.bfloat16)
        pos = torch.tensor([[5]], device="cuda")
        call = functools.partial(step.logits, x, pos, pos[0], carry.buffer, 128)
        with torch.no_grad():
            call()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                call()
                torch.cuda.synchronize()
        counts[kernels] = sum(
            1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
        )
    assert counts["fused"] < 0.6 * counts["vendor"], counts

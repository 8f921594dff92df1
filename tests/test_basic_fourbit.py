"""The reply model's 4-bit Linear layers (adapters/basic/fourbit.py), on seeded random Q4_1 blocks.

No model needed: weights are built as the GGUF stores them (``d * q + m``, ``d`` and ``m``
float16 per block of 32). The real model's layers are swapped and used in
``tests/test_basic_reply_cache.py``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from adapters.basic.fourbit import GROUP, FourBitLinear, four_bit


def _q4_1(rows: int, inputs: int, seed: int) -> torch.Tensor:
    """Float32 weights exactly as transformers dequantizes a Q4_1 tensor."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (rows, inputs // GROUP, GROUP), generator=generator)
    q[..., 0], q[..., 1] = 0, 15  # llama.cpp's blocks span their minimum to their maximum
    step = (torch.rand(rows, inputs // GROUP, generator=generator) * 0.01 + 1e-4).half().float()
    low = (-torch.rand(rows, inputs // GROUP, generator=generator) * 0.08).half().float()
    return (step[..., None] * q + low[..., None]).view(rows, inputs)


def test_the_blocks_give_the_float32_product_to_bfloat16_precision() -> None:
    weight = _q4_1(96, 192, seed=1)
    layer = FourBitLinear(weight)
    x = torch.randn(2, 5, 192, generator=torch.Generator().manual_seed(2))
    out = layer(x)
    assert out.shape == (2, 5, 96) and out.dtype == torch.float32
    exact = x @ weight.T
    assert torch.allclose(out, exact, rtol=0.02, atol=0.02 * exact.abs().max().item())


def test_a_rows_result_does_not_depend_on_the_rows_beside_it() -> None:
    """What the prefix cache's bit-for-bit proof needs: a prompt prefilled once, then a
    question, equals the two prefilled together."""
    layer = FourBitLinear(_q4_1(64, 128, seed=3))
    x = torch.randn(1, 23, 128, generator=torch.Generator().manual_seed(4))
    whole = layer(x)
    assert torch.equal(whole, torch.cat([layer(x[:, :17]), layer(x[:, 17:])], dim=1))
    assert torch.equal(whole, torch.cat([layer(x[:, i : i + 1]) for i in range(23)], dim=1))


def test_only_q4_1_layers_are_swapped_and_the_rest_counted() -> None:
    torch.manual_seed(5)
    model = nn.Sequential(
        nn.Linear(64, 32, bias=False), nn.Linear(32, 8), nn.Linear(64, 16, bias=False)
    )
    model[0].weight.data = _q4_1(32, 64, seed=6)
    # model[2] keeps nn.Linear's own random weights: not d * q + m
    model.add_module("lm_head", nn.Linear(8, 64, bias=False))
    kept = four_bit(model)
    assert isinstance(model[0], FourBitLinear)
    assert [type(m) for m in (model[1], model[2], model.lm_head)] == [nn.Linear] * 3
    assert kept == {
        f"a bias, or inputs not a multiple of {GROUP}": 1,
        "not Q4_1 blocks: the weights are not d * q + m": 1,
        "the output layer (tied to the embedding, Q8_0 in the file)": 1,
    }
    with pytest.raises(ValueError, match="not Q4_1"):
        FourBitLinear(torch.randn(8, 64))

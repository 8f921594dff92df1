"""The reply model's Linear layers run on their GGUF's own 4-bit blocks (CPU only).

The shipped GGUF stores every Linear layer of SmolLM2-135M-Instruct as Q4_1: blocks of 32 inputs
``w = d * q + m`` (``q`` in 0..15, ``d`` and ``m`` float16 per block), which transformers
dequantizes to float32 at load. :func:`four_bit` recovers each block's ``q``, ``d`` and ``m``
from those float32 weights (``m`` is the block's minimum and ``d`` its range over 15, as
llama.cpp quantized them; the recovery is checked to give every weight back bit for bit) and
swaps the layer for :class:`FourBitLinear`, which reads the 4-bit blocks through torch's own
kernel (``torch._weight_int4pack_mm_for_cpu``, groups of 32, ``w = (q - 8) * scale + zero``):
an eighth of the bytes float32 reads per token. The kernel takes bfloat16 (its float32 path is
~15x slower on our CPUs), so the activations and each block's ``d`` and ``m + 8 d`` are rounded
to bfloat16 (llama.cpp itself rounds the activations to 8-bit blocks for this product); its
rows are computed apart, so a row's result does not depend on how many rows share the call,
which the prefix cache's bit-for-bit proof needs. The output layer (tied to the embedding,
Q8_0 in the file) stays float32. A layer kept in float32 is counted with its reason.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["GROUP", "FourBitLinear", "four_bit"]

GROUP = 32  # Q4_1's block: inputs per scale and minimum


class FourBitLinear(nn.Module):
    """A bias-free Linear layer whose weight is 4-bit blocks of ``GROUP`` inputs."""

    packed: torch.Tensor  # the codes, in the kernel's packed layout
    scales_and_zeros: torch.Tensor  # per block: d, and m + 8 d (bfloat16)

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        rows, inputs = weight.shape
        blocks = weight.detach().view(rows, inputs // GROUP, GROUP)
        low = blocks.amin(-1)
        step = ((blocks.amax(-1) - low) / 15).half().float()  # d: float16 in the file
        q = torch.round((blocks - low[..., None]) / step.clamp_min(1e-30)[..., None])
        if not torch.equal(step[..., None] * q + low[..., None], blocks):
            raise ValueError("not Q4_1 blocks: the weights are not d * q + m")
        self.in_features, self.out_features = inputs, rows
        codes = q.view(rows, inputs).to(torch.int32)
        self.register_buffer("packed", torch._convert_weight_to_int4pack_for_cpu(codes, 1))
        scales_and_zeros = torch.stack([step.T, (low + 8 * step).T], dim=-1)
        self.register_buffer("scales_and_zeros", scales_and_zeros.to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        out = torch._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_and_zeros)
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def four_bit(model: nn.Module, keep: tuple[str, ...] = ("lm_head",)) -> dict[str, int]:
    """Swap ``model``'s Linear layers (but ``keep``'s) for :class:`FourBitLinear`, in place.

    Returns the layers kept in float32, counted by reason.
    """
    kept: dict[str, int] = {}

    def count(reason: str) -> None:
        kept[reason] = kept.get(reason, 0) + 1

    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear):
            continue
        if name.split(".")[-1] in keep:
            count("the output layer (tied to the embedding, Q8_0 in the file)")
            continue
        if module.bias is not None or module.in_features % GROUP:
            count(f"a bias, or inputs not a multiple of {GROUP}")
            continue
        try:
            swapped = FourBitLinear(module.weight)
        except ValueError:
            count("not Q4_1 blocks: the weights are not d * q + m")
            continue
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent), leaf, swapped)
    return kept

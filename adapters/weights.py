"""Seeded random weights for building a vendor architecture without its checkpoint.

Vendor initialisers zero some layers on purpose (adaLN-zero modulation, output projections), which
would make every output trivially zero and every exactness test vacuous. Here *every* parameter and
floating buffer marked as a parameter gets random values from one seeded generator, in the module's
own parameter order, so two builds with the same seed are identical bit for bit on any device.
"""

from __future__ import annotations

import math

import torch
from torch import nn


@torch.no_grad()
def randomize_(
    module: nn.Module, seed: int, *, gain: float = 1.0, on_device: bool = False
) -> nn.Module:
    """Fill every parameter of ``module`` in place with seeded random values and return it.

    Matrices and kernels (``dim >= 2``) get ``N(0, gain / fan_in)`` so activations stay O(1)
    through deep stacks; vectors named like norm scales (``weight`` of a 1-d parameter) get
    ``1 + 0.1·N(0,1)``; other vectors (biases) get ``0.1·N(0,1)``. Values are drawn on the CPU
    and copied to the parameter's device, so the result does not depend on where the module lives.
    ``on_device``: draw float32 values with a generator on the parameters' device instead (a 7B
    model in seconds on a GPU, where float64 draws on the CPU take minutes); still seeded, but
    the values then depend on the device.
    """
    device = next(module.parameters()).device if on_device else torch.device("cpu")
    generator = torch.Generator(device).manual_seed(seed)
    draw_dtype = torch.float32 if on_device else torch.float64
    for name, param in module.named_parameters():
        values = torch.randn(param.shape, generator=generator, dtype=draw_dtype, device=device)
        if param.dim() >= 2:
            fan_in = max(1, param[0].numel())
            values *= math.sqrt(gain / fan_in)
        elif name.endswith("weight") or name.endswith("original0"):
            values = 1.0 + 0.1 * values
        else:
            values *= 0.1
        param.copy_(values.to(param.dtype))
    return module

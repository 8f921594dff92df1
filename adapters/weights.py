"""Weights: state dicts loaded safely and checked, or seeded random ones without a checkpoint.

:func:`load_state` reads a checkpoint file with ``torch.load(weights_only=True)`` and checks what
it holds (a mapping of string keys to finite tensors), turning every failure into one line that
names the file and never repeats torch's advice to load unsafely.

Vendor initialisers zero some layers on purpose (adaLN-zero modulation, output projections), which
would make every output trivially zero and every exactness test vacuous. Here *every* parameter and
floating buffer marked as a parameter gets random values from one seeded generator, in the module's
own parameter order, so two builds with the same seed are identical bit for bit on any device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn


def load_state(path: Path, error: Callable[[str], Exception]) -> dict[str, Tensor]:
    """The state dict in ``path``, checked; raises ``error(message)`` naming the file and the fix.

    Refused: a file torch cannot read as a safe (``weights_only``) checkpoint, whatever torch
    says (its own text advises ``weights_only=False``, which would run code from the file); a
    file that holds no mapping; a non-string key; a value that is not a tensor; a floating
    tensor holding NaN or inf (such weights make every output NaN).
    """
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except (KeyboardInterrupt, MemoryError):
        raise
    except FileNotFoundError:
        raise error(f"{path} does not exist: point at the checkpoint folder's file") from None
    except Exception as cause:  # torch raises many types; none may leak its advice
        raise error(
            f"{path} is not a valid PyTorch checkpoint ({type(cause).__name__} while reading it): "
            "re-download or re-export the file; it is never loaded unsafely"
        ) from None
    if not isinstance(raw, dict):
        raise error(f"{path} holds a {type(raw).__name__}; expected a state_dict")
    for key, value in raw.items():
        if not isinstance(key, str):
            raise error(f"{path} has a key {key!r} that is not a string: not a state_dict")
        if not isinstance(value, Tensor):
            raise error(f"{path}: `{key}` is a {type(value).__name__}, not a tensor")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise error(
                f"{path}: `{key}` holds {bad} NaN or infinite values of {value.numel()}: "
                "the checkpoint is corrupt; re-download it"
            )
    return raw


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

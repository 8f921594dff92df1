"""PersonaPlex's RMS norms, run eager as its code runs them.

``moshi`` 0.2.13 wraps its RMS norm's body (``moshi.modules.transformer._rms_norm``) in
``torch_compile_lazy``: on CUDA, where its layers leave compile on, every norm of the LM (two a
layer, the output norm, the depformer's) runs as one inductor kernel, whose float32 mean and
``rsqrt`` round differently from eager's. PersonaPlex's fork (NVIDIA/personaplex at the commit
we compare with) has the same body without the wrapper: its norms run eager. So the hidden
states differed in a last bf16 bit now and then, and a sample flipped: at the released shapes on
the H200 the first text token sampled after the prompts (frame 1's) already differed, in its
graphs and its eager loop alike. On the CPU both run eager (their layers turn compile off off
CUDA), which is why the CPU comparison was exact.

:func:`eager_norms` gives every ``RMSNorm`` of a PersonaPlex LM the vendor's own body, uncompiled
(the functions both packages compile, the gated feed-forward and the rotary embedding, stay
compiled on both sides). The Moshi family keeps ``moshi``'s compiled norm: its reference is
``moshi``'s own loop.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from adapters.moshi.vendor import replace_class

__all__ = ["eager_norms"]


def eager_norms(*models: Any) -> int:
    """Make every ``RMSNorm`` under ``models`` run its body eager; the number of norms."""
    from moshi.modules.transformer import RMSNorm

    changed = 0
    for model in models:
        for norm in model.modules():
            if isinstance(norm, RMSNorm):
                replace_class(norm, "Eager", forward=_forward)
                changed += 1
    return changed


def _forward(self: Any, x: Tensor) -> Tensor:
    """``RMSNorm.forward`` with the vendor's body itself, not its ``torch_compile_lazy`` wrapper
    (``__wrapped__``; without one, ``NO_TORCH_COMPILE`` was set and the body is the function)."""
    from moshi.modules.transformer import _rms_norm

    body = getattr(_rms_norm, "__wrapped__", _rms_norm)
    out: Tensor = body(x, self.alpha, self.dtype, self.eps)
    return out

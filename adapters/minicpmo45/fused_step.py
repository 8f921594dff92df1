"""The ``fused`` kernel choice of the backbone's step: fewer, larger kernels per layer.

The vendor's modules launch ~60 small kernels a layer in a decode step (RMSNorm as
cast/pow/mean/add/rsqrt/mul/cast/mul, q/k norm, rotary with ``rotate_half``'s slices, ``cat``
and ``neg``, separate q/k/v and gate/up GEMVs, SiLU then mul, residual adds); replayed in one
CUDA graph each still costs a few microseconds of GPU time whatever its size. With
``kernels: fused`` (``backbone.yaml``) :class:`~.llm_step.CarryStep` runs each layer as:

* **weights joined once at load** (:func:`join_weights`): q/k/v into one ``[q + k + v, hidden]``
  weight and gate/up into one ``[2 * intermediate, hidden]``; the vendor's ``q_proj.weight`` (and
  the others) become row views of the joined tensor, so memory does not grow and the vendor's
  own code (its loop, a fallback) keeps working on the same values;
* **two pieces a layer** (:func:`attend_in`, :func:`attend_out`), each a pure function of its
  tensors that never sees the attended extent: its shapes depend only on the tokens fed ``L``.
  Compiled (:func:`compiled`: inductor, mode "default" with its ``deterministic`` option, no
  graphs of its own, ``fullgraph``, ``dynamic=False``) there is one compile per ``L`` and
  model, the same for every layer and every extent: the elementwise work (the norms, rotary,
  the carry's write, SiLU * up, residual adds, the next layer's input norm) fuses into a few
  generated kernels around the GEMMs. The attention runs between them: the masked SDPA over
  the extent, or for one token under ``decode_attention: flex`` a third compiled piece
  (:func:`attend_one`, flex attention over the whole carry, one compile per model);
* ``DUPLEXCADENCE_NO_COMPILE=1`` runs the same pieces uncompiled (the joined GEMMs still count).

The arithmetic is the vendor's (RMSNorm in float32 and cast back before the weight, rotary,
SiLU); inductor may keep an intermediate in float32 where eager rounds it, so the fused step's
logits can differ from the vendor's by about one bf16 ulp. Every arm runs this same choice: eager
is the same pieces called eagerly, so every arm still equals eager bit for bit.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from adapters.minicpmo45 import kernel_count

__all__ = [
    "DECODES",
    "KERNELS",
    "NO_COMPILE_ENV",
    "Compiled",
    "attend_in",
    "attend_one",
    "attend_out",
    "compiled",
    "join_weights",
    "rms",
]

KERNELS = ("vendor", "fused")
"""The backbone's kernel choices (``backbone.yaml`` ``kernels``)."""

DECODES = ("sdpa", "flex")
"""The attention of a one-token step (``backbone.yaml`` ``decode_attention``): the pinned SDPA
backend over the extent, or :func:`attend_one`."""

NO_COMPILE_ENV = "DUPLEXCADENCE_NO_COMPILE"
"""Set to 1: the fused pieces run uncompiled (the joined weights stay)."""

RECOMPILES = 64
"""The least recompile limit the pieces get (one compile per fed length and model)."""


def rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """The vendor's RMSNorm (``Qwen3RMSNorm`` / ``LlamaRMSNorm``): in float32, cast back, then
    times the weight."""
    dtype = x.dtype
    xf = x.to(torch.float32)
    variance = xf.pow(2).mean(-1, keepdim=True)
    return weight * (xf * torch.rsqrt(variance + eps)).to(dtype)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def attend_in(
    normed: Tensor,
    qkv: Tensor,
    q_norm: Tensor | None,
    k_norm: Tensor | None,
    cos: Tensor,
    sin: Tensor,
    eps: float,
    kv_heads: int,
    head_dim: int,
    kv: Tensor,
    slots: Tensor,
) -> Tensor:
    """One layer's attention inputs from its normed input ``[1, L, hidden]``: the joined q/k/v
    GEMM, the q/k norms (where the model has them), rotary; the new keys and values written to
    the layer's carry ``kv [2, kv_heads, capacity, head_dim]`` at ``slots [L]`` in place (one
    ``index_copy_`` of the whole carry: inductor stores them from the kernel that makes them,
    where a copy into a view of it, ``kv[0]``, costs a copy of the whole carry). Returns the
    queries grouped by key head ``[1, kv_heads, G * L, head_dim]``."""
    L = normed.shape[1]
    heads = qkv.shape[0] // head_dim - 2 * kv_heads
    q, k, v = torch.split(
        F.linear(normed, qkv), [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1
    )
    q, k = q.view(1, L, heads, head_dim), k.view(1, L, kv_heads, head_dim)
    if q_norm is not None and k_norm is not None:
        q, k = rms(q, q_norm, eps), rms(k, k_norm, eps)
    q = _rotate(q.transpose(1, 2), cos, sin)
    k = _rotate(k.transpose(1, 2), cos, sin)
    v = v.view(1, L, kv_heads, head_dim).transpose(1, 2)
    kv.index_copy_(2, slots, torch.stack((k[0], v[0])))
    return q.reshape(1, kv_heads, (heads // kv_heads) * L, head_dim)


def attend_one(grouped: Tensor, kv: Tensor, slots: Tensor, block: int) -> Tensor:
    """The attention of one fed token (``slots [1]``, a decode step) over the layer's whole carry
    ``kv [2, kv_heads, capacity, head_dim]``, by flex attention with a block mask: the blocks of
    ``block`` slots wholly at or below the token's slot are attended whole, the one holding it
    through the mask ``slot <= slots[0]``, the blocks above are never read. So its cost follows
    the live slots, not the capacity; on CUDA inductor runs it as its flex-decoding kernel, the
    carry split across the GPU's multiprocessors (the efficient SDPA kernel gives each key head
    one block: ~23 us a layer at 512 slots on the H200). ``grouped [1, kv_heads, G, head_dim]``
    are the queries as :func:`attend_in` lays them out; the result has the same layout (what the
    SDPA on the grouped layout returns). ``capacity`` must be a multiple of ``block``."""
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    _, kv_heads, group, head_dim = grouped.shape
    capacity = kv.shape[2]
    blocks = capacity // block

    def seen(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= slots[q_idx]

    live = slots[:1] + 1
    whole = torch.div(live, block, rounding_mode="floor").to(torch.int32)
    part = (torch.remainder(live, block) != 0).to(torch.int32)
    order = torch.arange(blocks, dtype=torch.int32, device=grouped.device)
    edge = torch.where(order == 0, whole.clamp(max=blocks - 1), order)  # the partial block first
    mask = BlockMask.from_kv_blocks(
        part.view(1, 1, 1), edge.view(1, 1, 1, blocks), whole.view(1, 1, 1),
        order.view(1, 1, 1, blocks), BLOCK_SIZE=block, mask_mod=seen,
        seq_lengths=(1, capacity), compute_q_blocks=False,
    )  # fmt: skip
    queries = grouped.reshape(1, kv_heads * group, 1, head_dim)
    out = flex_attention(queries, kv[0:1], kv[1:2], block_mask=mask, enable_gqa=True)
    assert isinstance(out, Tensor)
    return out.view(1, kv_heads, group, head_dim)


def attend_out(
    attended: Tensor,
    residual: Tensor,
    o_proj: Tensor,
    post_norm: Tensor,
    gate_up: Tensor,
    down: Tensor,
    next_norm: Tensor,
    eps: float,
) -> tuple[Tensor, Tensor]:
    """The rest of a layer from the attention's output ``[1, kv_heads, G * L, head_dim]``: the
    output projection and residual, the post-attention norm, the joined gate/up GEMM, SiLU * up,
    the down projection and residual; and the next layer's input norm (the final norm after the
    last layer) on the result. Returns ``(hidden, normed)``."""
    L = residual.shape[1]
    out = attended.reshape(1, -1, L, attended.shape[-1]).transpose(1, 2).reshape(1, L, -1)
    h = residual + F.linear(out, o_proj)
    gate, up = F.linear(rms(h, post_norm, eps), gate_up).chunk(2, dim=-1)
    h = h + F.linear(F.silu(gate) * up, down)
    return h, rms(h, next_norm, eps)


def join_weights(linears: list[nn.Linear]) -> Tensor:
    """One ``[sum of rows, in]`` weight whose row blocks are the ``linears``' weights, each of
    which becomes a view of it (no bias: refused). Already joined (adjacent views of one
    storage, as a second step on the same model finds them): that storage, no copy."""
    weights = [lin.weight for lin in linears]
    if any(getattr(lin, "bias", None) is not None for lin in linears):
        raise ValueError("fused kernels: a projection with a bias is not joined; use vendor")
    first = weights[0]
    rows = sum(int(w.shape[0]) for w in weights)
    adjacent = all(w.is_contiguous() for w in weights)
    offset = first.storage_offset()
    for w in weights:
        adjacent = adjacent and w.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        adjacent = adjacent and w.storage_offset() == offset
        offset += w.numel()
    if adjacent:
        return first.detach().as_strided((rows, first.shape[1]), (first.shape[1], 1))
    joined = torch.cat([w.detach() for w in weights])
    start = 0
    for lin, w in zip(linears, weights, strict=True):
        n = int(w.shape[0])
        lin.weight.data = joined[start : start + n]  # the original storage is freed
        start += n
    return joined


class Compiled:
    """``fn`` through ``torch.compile`` (inductor, mode "default" with its ``deterministic``
    option, ``fullgraph``, ``dynamic=False``) unless ``DUPLEXCADENCE_NO_COMPILE=1``. The first
    call of each signature compiles: its seconds are summed in :attr:`compile_s`."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.name, self.fn = name, fn
        self.enabled = os.environ.get(NO_COMPILE_ENV, "") not in ("1", "true", "yes")
        self.compile_s = 0.0
        self.compiles = 0
        self.calls: Counter[tuple[Any, ...]] = Counter()
        """Calls per signature (shapes, dtypes, constants, grad mode)."""
        self.kernels: dict[tuple[Any, ...], int] = {}
        """Kernels inductor generated per signature (each launched once a call)."""
        self._compiled: Callable[..., Any] = fn
        if self.enabled:
            limits: Any = torch._dynamo.config
            limits.recompile_limit = max(int(limits.recompile_limit), RECOMPILES)
            limits.accumulated_recompile_limit = max(
                int(limits.accumulated_recompile_limit), 4 * RECOMPILES
            )
            # mode "default" (no graphs of its own) with inductor's deterministic option: no
            # on-device benchmarking that can change numerics (a reduction's block picked by
            # timing), so two compiles of one piece (another grad mode) run the same kernels
            self._compiled = torch.compile(
                fn, fullgraph=True, dynamic=False, options={"deterministic": True}
            )

    def __call__(self, *args: Any) -> Any:
        if not self.enabled:
            return self.fn(*args)
        shapes = [
            (tuple(a.shape), a.dtype, a.device.type) if isinstance(a, Tensor) else a for a in args
        ]
        key = (*shapes, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        self.calls[key] += 1
        if key in self.kernels and kernel_count.COUNTING:
            return self._counted(key, args)
        if key in self.kernels:
            return self._compiled(*args)
        from torch._inductor import metrics

        t0 = time.perf_counter()
        before = metrics.generated_kernel_count
        out = self._compiled(*args)
        self.kernels[key] = metrics.generated_kernel_count - before
        self.compile_s += time.perf_counter() - t0
        self.compiles += 1
        return out

    def _counted(self, key: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
        """Under a kernel count (:mod:`~.kernel_count`, whose dispatch mode dynamo refuses):
        the piece run uncompiled with that mode suspended; what its compiled code launches is
        added to ``kernel_count.COUNTING[-1]``: its generated kernels and its GEMMs (inductor
        calls ATen's)."""
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes(), kernel_count.OpCounter() as inner:
            out = self.fn(*args)
        gemms = sum(n for name, n in inner.ops.items() if name in kernel_count.GEMMS)
        kernel_count.COUNTING[-1]["generated"] += self.kernels[key]
        kernel_count.COUNTING[-1]["gemms"] += gemms
        return out


def compiled() -> dict[str, Compiled]:
    """The pieces, each compiled once per process (shared by every step and model)."""
    global _PIECES
    if _PIECES is None:
        _PIECES = {
            "attend_in": Compiled(attend_in, "attend_in"),
            "attend_one": Compiled(attend_one, "attend_one"),
            "attend_out": Compiled(attend_out, "attend_out"),
        }
    return _PIECES


_PIECES: dict[str, Compiled] | None = None

"""One forward of the backbone's decoder stack over its KV carry, on the vendor's own modules.

MiniCPM-o 4.5's LLM is a Qwen3 (RMSNorm, q/k norm, rotary, grouped-query attention) and its TTS
head a Llama (the same without q/k norm). The vendor runs them through transformers with a
growing ``DynamicCache``; :class:`CarryStep` runs the same stack with the vendor's modules and
weights (``input_layernorm``, ``q_proj``, ``q_norm``, ``rotary_emb``, ``mlp``, ...), but its
attention reads and writes a :class:`~adapters.minicpmo45.kv.KVCarry` buffer in place:

* the new keys and values go to the carry at ``slots`` (``index_copy_``, a device tensor);
* attention covers the carry's first ``extent`` slots with the mask ``slot <= slots[row]``
  (additive, made once a step: :func:`attention_bias`); the extent is the least of a small ladder
  (every multiple of the declaration's ``extent_step`` up to the capacity:
  :meth:`~.kv.KVCarry.extent`) that holds every live slot, a host integer and so part of the
  signature: one exact signature per ``(L, extent)``, never one per cache length, and the same
  choice under every arm. Why not the whole capacity (the first design): by bytes the LLM's carry
  (36 layers x 2 x 8 heads x 4,096 slots x 128 x 2 B = 604 MB) is +3.7 % of a decode step's 16.4
  GB of weights, but measured on the H200 (``bench/minicpmo45.py``'s ``extent`` phase, 2026-12-02
  01:05) one replayed decode step took 14.75 ms attending 4,096 slots against 9.47 ms attending
  512: the masked attention kernel works through the extent with one block per key head (8 here),
  so its time grows with the extent far beyond its bytes. The live length sits between the prompt
  and the window's high mark; the ladder attends at most ``extent_step`` slots more than it. The
  price in agreement with the vendor's loop: attending masked slots changes the kernel's reduction
  blocking, so logits differ from transformers' (which attends the live length) by about one bf16
  ulp. Seen on the CPU (Qwen3 in bf16, 2 layers): with the kernel transformers picks there (flash)
  and a carry exactly as long as the cache, every logit equals transformers' bit for bit; with 64
  slots none does (max 0.0039). Greedy text agrees; sampled text parts where a draw sits on a
  boundary;
* a one-token call (a decode step, a speech token) under ``decode_attention: flex``
  (``backbone.yaml`` ``decode_attention``, the same under every arm) attends by flex attention
  over the whole carry instead (:func:`~.fused_step.attend_one`): a block mask built on the
  device from ``slots`` reads the blocks at or below the live slots and never the others, and on
  CUDA the carry is split across the multiprocessors (flex decoding), so its time follows the
  live slots and not the extent. Measured on the H200 (2026-12-02 14:14): a replayed decode step
  5.39 ms at the 512 extent and 5.43 at 4,096, against 5.74 and 11.07 with the efficient SDPA
  kernel above. The extent stays in the signature (the catalog is unchanged); such a call
  ignores it;
* grouped-query attention without copying keys: the ``G`` query heads of one key head are laid
  out as ``G * L`` query rows against that head's keys (the mask repeated ``G`` times), so
  scaled-dot-product attention runs on the carry's own views;
* the SDPA backend is pinned (:data:`BACKENDS`), and named in the replay signature.

So a call's shapes depend only on ``L`` (the tokens fed at once) and the extent, never on the
cache length: the decode step (``L = 1``) is one exact signature per extent of the ladder.
Positions (for the rotary embedding) and slots are separate inputs: the LLM's are equal (the
vendor feeds position = cache length), the TTS head's positions are the vendor's own.

Every method is capturable once its shapes are fixed: no host reads, no allocation outside the
caching allocator, the constant ``arange`` made at construction.

``kernels`` (``backbone.yaml``, the same under every arm): ``vendor`` runs each layer on the
vendor's modules as above; ``fused`` on joined weights and compiled pieces with the same
arithmetic (:mod:`adapters.minicpmo45.fused_step`), the attention between them unchanged.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from adapters.minicpmo45.fused_step import DECODES, KERNELS, compiled, join_weights

__all__ = ["BACKENDS", "CarryStep", "attention_bias", "sdpa_backend"]

BACKENDS = ("efficient", "math", "flash", "cudnn")
"""SDPA backends a step may be pinned to (``torch.nn.attention.SDPBackend`` by our name)."""


def sdpa_backend(name: str) -> AbstractContextManager[None]:
    """``sdpa_kernel`` pinned to the backend of our name (:data:`BACKENDS`)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }[name]
    return sdpa_kernel([backend])


def attention_bias(cols: Tensor, slots: Tensor, group: int, dtype: torch.dtype) -> Tensor:
    """The additive mask ``[1, 1, group * L, extent]`` over the slots ``cols [extent]`` for the
    rows written at ``slots [L]`` (each repeated for the ``group`` query heads of a key head): 0
    where ``col <= slots[row]``, -inf elsewhere, in the query's ``dtype``. What SDPA makes of the
    boolean mask inside every call (``at::where(mask, 0, -inf)`` in the query's dtype, three
    kernels a layer), made once a step: every layer's attention kernel reads the same values."""
    keep = (cols.unsqueeze(0) <= slots.unsqueeze(1)).repeat(group, 1)
    bias = torch.zeros(keep.shape, dtype=dtype, device=cols.device)
    return bias.masked_fill_(keep.logical_not(), float("-inf")).view(1, 1, *keep.shape)


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class CarryStep:
    """The decoder stack of ``core`` (a transformers ``Qwen3Model`` / ``LlamaModel``: ``layers``,
    ``norm``, ``rotary_emb``, ``config``) over a carry of ``capacity`` slots.

    Args:
        core: the vendor's decoder model (its modules and weights are used as they are).
        capacity: the carry's slots (the attended extent of every call).
        backend: the pinned SDPA backend (:data:`BACKENDS`).
        head: the LM head for :meth:`logits` (None for a stack whose caller has its own heads).
        kernels: ``vendor`` or ``fused`` (module docstring).
        decode: a one-token call's attention: ``sdpa`` (the pinned backend over the extent, as
            every other call) or ``flex`` (:func:`~.fused_step.attend_one` over the whole carry,
            blocks of ``block`` slots, those above the live slots never read).
        block: the flex attention's block of slots (a divisor of ``capacity``).
    """

    def __init__(
        self,
        core: nn.Module,
        capacity: int,
        backend: str,
        head: nn.Module | None = None,
        kernels: str = "vendor",
        decode: str = "sdpa",
        block: int = 64,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"SDPA backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        if kernels not in KERNELS:
            raise ValueError(f"kernels {kernels!r}: expected one of {', '.join(KERNELS)}")
        if decode not in DECODES:
            raise ValueError(f"decode attention {decode!r}: expected one of {', '.join(DECODES)}")
        if decode == "flex" and capacity % block:
            raise ValueError(f"flex decode: the capacity {capacity} is not a multiple of {block}")
        self.kernels, self.decode, self.block = kernels, decode, block
        config: Any = core.config
        self.core, self.head, self.backend, self.capacity = core, head, backend, capacity
        self.layers: Any = core.layers
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        self.group = self.heads // self.kv_heads
        weight = next(core.parameters())
        self.cols = torch.arange(capacity, device=weight.device)  # the carry's slot numbers
        self.fused: list[_Layer] = self._join(core) if kernels == "fused" else []

    def _join(self, core: Any) -> list[_Layer]:
        """Each layer's weights for the fused pieces: q/k/v and gate/up joined (the modules'
        weights become views of them), the next layer's input norm (the final norm's last)."""
        config = core.config
        act = str(getattr(config, "hidden_act", "silu"))
        if act != "silu":
            raise ValueError(f"fused kernels: the MLP's activation is {act!r}, not silu")
        eps = float(config.rms_norm_eps)
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
            if any(
                lin.bias is not None for lin in (*linears, *mlp.children()) if hasattr(lin, "bias")
            ):
                raise ValueError("fused kernels: a projection with a bias; use vendor")
        layers: list[_Layer] = []
        for i, layer in enumerate(self.layers):
            attn, mlp = layer.self_attn, layer.mlp
            q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
            following = (
                self.layers[i + 1].input_layernorm if i + 1 < len(self.layers) else core.norm
            )
            layers.append(
                _Layer(
                    qkv=join_weights([attn.q_proj, attn.k_proj, attn.v_proj]),
                    q_norm=q_norm.weight.detach() if q_norm is not None else None,
                    k_norm=k_norm.weight.detach() if k_norm is not None else None,
                    o_proj=attn.o_proj.weight.detach(),
                    post_norm=layer.post_attention_layernorm.weight.detach(),
                    gate_up=join_weights([mlp.gate_proj, mlp.up_proj]),
                    down=mlp.down_proj.weight.detach(),
                    next_norm=following.weight.detach(),
                    eps=eps,
                )
            )
        return layers

    def carry_shape(self) -> tuple[int, int, int, int, int]:
        """``[layers, 2, kv_heads, capacity, head_dim]``."""
        return (len(self.layers), 2, self.kv_heads, self.capacity, self.head_dim)

    def hidden(
        self, x: Tensor, positions: Tensor, slots: Tensor, buffer: Tensor, extent: int
    ) -> Tensor:
        """The stack on ``x [1, L, hidden]`` at ``positions [1, L]``, writing ``slots [L]`` of
        ``buffer`` and attending its first ``extent`` slots (every slot written so far must lie
        below it: :meth:`~.kv.KVCarry.extent`); the final norm's output ``[1, L, hidden]`` (what the
        vendor reads as ``hidden_states[-1]`` / ``last_hidden_state``)."""
        with sdpa_backend(self.backend):
            core: Any = self.core
            cos, sin = core.rotary_emb(x, positions)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            L = x.shape[1]
            mask = (
                None if self._flex(L)
                else attention_bias(self.cols[:extent], slots, self.group, x.dtype)
            )  # fmt: skip
            if self.fused:
                return self._fused(x, cos, sin, slots, mask, buffer, extent)
            h = x
            for i, layer in enumerate(self.layers):
                residual = h
                h = layer.input_layernorm(h)
                h = self._attention(layer.self_attn, h, cos, sin, slots, mask, buffer[i], L, extent)
                h = residual + h
                residual = h
                h = layer.post_attention_layernorm(h)
                h = layer.mlp(h)
                h = residual + h
            out: Tensor = core.norm(h)
            return out

    def _flex(self, L: int) -> bool:
        """Whether a call feeding ``L`` tokens attends by :func:`~.fused_step.attend_one`."""
        return self.decode == "flex" and L == 1

    def _attend(
        self, grouped: Tensor, kv: Tensor, slots: Tensor, mask: Tensor | None, extent: int
    ) -> Tensor:
        """The attention of the grouped queries ``[1, kv_heads, G * L, head_dim]`` over the layer's
        carry ``kv`` (written already): :func:`~.fused_step.attend_one` for one token under
        ``decode_attention: flex`` (``mask`` None), else the pinned SDPA over the first
        ``extent`` slots with ``mask``."""
        if mask is None:
            out: Tensor = compiled()["attend_one"](grouped, kv, slots, self.block)
            return out
        keys, values = kv[0, :, :extent].unsqueeze(0), kv[1, :, :extent].unsqueeze(0)
        return F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask)

    def logits(
        self, x: Tensor, positions: Tensor, slots: Tensor, buffer: Tensor, extent: int
    ) -> tuple[Tensor, Tensor]:
        """:meth:`hidden` and the head on its last row: ``(logits [1, vocab], hidden)``."""
        assert self.head is not None, "CarryStep.logits needs the LM head"
        hidden = self.hidden(x, positions, slots, buffer, extent)
        logits: Tensor = self.head(hidden[:, -1:])[:, -1]
        return logits, hidden

    def _fused(
        self, x: Tensor, cos: Tensor, sin: Tensor, slots: Tensor, mask: Tensor | None,
        buffer: Tensor, extent: int,
    ) -> Tensor:  # fmt: skip
        pieces = compiled()
        attend_in, attend_out = pieces["attend_in"], pieces["attend_out"]
        h, normed = x, self.layers[0].input_layernorm(x)  # once a step: the vendor's module
        for i, w in enumerate(self.fused):
            kv = buffer[i]
            q = attend_in(
                normed, w.qkv, w.q_norm, w.k_norm, cos, sin, w.eps, self.kv_heads, self.head_dim,
                kv, slots,
            )  # fmt: skip
            out = self._attend(q, kv, slots, mask, extent)
            h, normed = attend_out(
                out, h, w.o_proj, w.post_norm, w.gate_up, w.down, w.next_norm, w.eps
            )
        final: Tensor = normed
        return final

    def _attention(
        self,
        attn: Any,
        h: Tensor,
        cos: Tensor,
        sin: Tensor,
        slots: Tensor,
        mask: Tensor | None,
        kv: Tensor,
        L: int,
        extent: int,
    ) -> Tensor:
        shape = (1, L, -1, self.head_dim)
        q = attn.q_proj(h).view(shape)
        k = attn.k_proj(h).view(shape)
        v = attn.v_proj(h).view(shape).transpose(1, 2)
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        if q_norm is not None and k_norm is not None:
            q, k = q_norm(q), k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        kv[0].index_copy_(1, slots, k[0])
        kv[1].index_copy_(1, slots, v[0])
        grouped = q.reshape(1, self.kv_heads, self.group * L, self.head_dim)
        out = self._attend(grouped, kv, slots, mask, extent)
        out = out.reshape(1, self.heads, L, self.head_dim).transpose(1, 2).reshape(1, L, -1)
        result: Tensor = attn.o_proj(out)
        return result


@dataclass(frozen=True)
class _Layer:
    """One layer's weights for the fused pieces (views of the vendor's, joined where fused)."""

    qkv: Tensor
    q_norm: Tensor | None
    k_norm: Tensor | None
    o_proj: Tensor
    post_norm: Tensor
    gate_up: Tensor
    down: Tensor
    next_norm: Tensor
    eps: float

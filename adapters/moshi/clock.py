"""One clock per transformer: its layers advance together, so their bookkeeping is done once.

Every self-attention layer of a streaming transformer keeps its own step counters (its
``RingKVCache``'s ``end_offset``, its attention's ``offset``) and, each step, derives the same
things from them: the ring's write slots and every slot's position, the causal mask, and the
counters' update: about 25 small kernels a layer, and a 7B frame steps ~96 such layers. All
layers of one transformer hold the same counters (they are stepped, masked and reset together),
so :func:`share_clocks` gives them one clock: they share the counter tensors; the first layer
(the leader) derives the slots, positions and mask once a step, with the vendor's formulas, and
advances the ring's counter; the others (followers) write their keys and values at its slots and
attend with its mask; the last layer advances the attention's counter, after all have read it
(the rotary embedding reads it in every layer: it stays the vendor's, compiled on CUDA). Keys,
values, positions and so every output are the vendor's, bit for bit (integer arithmetic on equal
values); only the number of kernels changes.

The attention's step is the vendor's ``StreamingMultiheadAttention.forward`` (moshi 0.2.13) for
a streaming self-attention, with the per-step derivations read from the clock and weights per
step applied without a copy (:func:`adapters.moshi.one_step.per_step`); any other call (not
streaming, cross-attention) runs the vendor's own.

Constraints (checked where cheap):

* the transformer's layers run in order, each once a step (``StreamingTransformer.forward``);
* one batch row per stream, and the same exec mask on every layer (``set_exec_mask`` sets it on
  all of them);
* the layers agree on ring capacity, exec-mask handling, causality and context (each
  transformer builds them from one set of arguments);
* installed after ``streaming()`` is entered, which creates the rings and the counters. A layer
  keeps the clock only for the streaming state it was installed on: once ``streaming()`` is left
  and entered again (the vendor's own loop on the same model does so), the layer runs the
  vendor's forward on its fresh state, as if never installed.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from adapters.moshi.one_step import per_step
from adapters.moshi.vendor import replace_class

__all__ = ["share_clocks"]


class _Clock:
    """What the leader derived this step, for its followers."""

    slots: Tensor  # (B, T): where this step's keys and values go in every ring
    positions: Tensor  # (B, capacity): each slot's step, -1 when empty
    mask: Tensor | None  # (B, 1, T, capacity): which slots each query may attend to


def share_clocks(*models: Any) -> int:
    """Give each streaming transformer under ``models`` one clock; the number of layers that
    now follow a leader instead of keeping their own."""
    from moshi.modules.transformer import RingKVCache, StreamingTransformer

    followers = 0
    for model in models:
        for transformer in model.modules():
            if not isinstance(transformer, StreamingTransformer):
                continue
            layers = [
                layer.self_attn
                for layer in transformer.layers
                if (state := getattr(layer.self_attn, "_streaming_state", None)) is not None
                and isinstance(state.kv_cache, RingKVCache)
            ]
            if len(layers) < 2:
                continue
            clock = _Clock()
            leader, *rest = layers
            for attention in rest:  # all checked before any is changed
                _check_alike(attention, leader)
            for attention in layers:
                _install(attention, leader, clock, closes=attention is layers[-1])
            followers += len(rest)
    return followers


# -- the attention ------------------------------------------------------------------------------


def _install(attention: Any, leader: Any, clock: _Clock, *, closes: bool) -> None:
    """Make ``attention`` (and its ring) lead ``clock``, or follow ``leader`` on it; the layer
    that ``closes`` the step advances the attention's counter."""
    if attention is not leader:
        state, lead = attention._streaming_state, leader._streaming_state
        state.offset = lead.offset  # one counter: resetting any layer resets the clock
        _follow(state.kv_cache, lead.kv_cache, clock)
    else:
        _lead(attention._streaming_state.kv_cache, clock)
    attention.clock, attention.leads, attention.closes = clock, attention is leader, closes
    # weakly: leaving streaming() frees the state and its rings, as the vendor's does
    attention.clocked_state = weakref.ref(attention._streaming_state)
    replace_class(attention, "Clocked", forward=_forward)


def _check_alike(attention: Any, leader: Any) -> None:
    ring, lead = attention._streaming_state.kv_cache, leader._streaming_state.kv_cache
    if ring.capacity != lead.capacity or ring.respect_exec_mask != lead.respect_exec_mask:
        raise ValueError("a transformer's rings differ in capacity or exec-mask handling")
    if (attention.causal, attention.context) != (leader.causal, leader.context):
        raise ValueError("a transformer's attention layers differ in causality or context")


def _forward(self: Any, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
    """The vendor's forward for a streaming self-attention, the step's derivations shared."""
    from einops import rearrange
    from moshi.modules.transformer import expand_repeated_kv

    state = self._streaming_state
    if state is None or state is not self.clocked_state() or self.cross_attention:
        return self.vendor_class.forward(self, query, key, value)  # type: ignore[no-any-return]
    clock, T = self.clock, query.shape[1]
    projected = per_step(self.in_projs, self.weights_per_step_schedule, query, state.offset_cpu)
    if self.kv_repeat == 1:
        q, k, v = rearrange(projected, "b t (p h d) -> p b h t d", p=3, h=self.num_heads)
    else:
        q = rearrange(projected[:, :, : self.embed_dim], "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(
            projected[:, :, self.embed_dim :],
            "b t (p kh d) -> p b kh t d",
            p=2,
            kh=self.num_heads // self.kv_repeat,
        )
    if self.rope:  # the vendor's, per layer (compiled on CUDA): every layer reads the step's offset
        q, k = self.rope(q, k, state.offset, time_before_heads=False)
    k, v, pos_k = self._complete_kv(k, v)
    if self.kv_repeat > 1:
        k, v = expand_repeated_kv(k, self.kv_repeat), expand_repeated_kv(v, self.kv_repeat)
    if self.leads:
        clock.mask = _mask(self, state.offset, pos_k, T)
    x = F.scaled_dot_product_attention(q, k, v, clock.mask, dropout_p=0.0)
    x = rearrange(x, "b h t d -> b t (h d)")
    x = per_step(self.out_projs, self.weights_per_step_schedule, x, state.offset_cpu)
    if self.closes:  # the last layer advances the one counter, after every layer has read it
        state.offset[:] = torch.where(state.exec_mask, state.offset + T, state.offset)
    state.offset_cpu += T
    return x


def _mask(attention: Any, offset: Tensor, pos_k: Tensor, T: int) -> Tensor | None:
    """The vendor's causal mask: a query sees filled slots at most ``context - 1`` steps back."""
    if not attention.causal:
        return None
    pos_k = pos_k[:, None]
    pos_q = offset.view(-1, 1, 1) + torch.arange(T, device=offset.device, dtype=torch.long).view(
        -1, 1
    )
    delta = pos_q - pos_k
    mask = (pos_k >= 0) & (delta >= 0)
    if attention.context is not None:
        mask = mask & (delta < attention.context)
    return mask[:, None]


# -- the rings ----------------------------------------------------------------------------------


def _lead(ring: Any, clock: _Clock) -> None:
    """The vendor's ``complete``, noting the step's write slots and positions on ``clock``."""
    ring.clock = clock
    replace_class(ring, "Leading", complete=_lead_complete)


def _lead_complete(self: Any, k: Tensor, v: Tensor, exec_mask: Tensor) -> Any:
    end = self.end_offset
    steps = torch.arange(k.shape[2], device=end.device, dtype=end.dtype)
    self.clock.slots = (steps + end.view(-1, 1)) % self.capacity
    result = self.vendor_class.complete(self, k, v, exec_mask)
    self.clock.positions = result.positions
    return result


def _follow(ring: Any, leader: Any, clock: _Clock) -> None:
    """Write keys and values at the leader's slots (as the vendor's ``complete`` writes them),
    return its positions; the leader's ``end_offset`` becomes this ring's too, so resetting any
    ring resets the one clock."""
    ring.end_offset = leader.end_offset
    ring.clock = clock
    replace_class(ring, "Following", complete=_follow_complete)


def _follow_complete(self: Any, k: Tensor, v: Tensor, exec_mask: Tensor) -> Any:
    from moshi.modules.transformer import KVCacheResult

    B, H, T, D = k.shape
    slots = self.clock.slots
    if self.respect_exec_mask:
        at = slots.view(B, 1, T, 1).expand(-1, H, T, D)
        self.cache[0].scatter_(2, at, k)
        self.cache[1].scatter_(2, at, v)
    else:
        self.cache[0].index_copy_(2, slots[0], k)
        self.cache[1].index_copy_(2, slots[0], v)
    return KVCacheResult(self.cache[0], self.cache[1], self.clock.positions)

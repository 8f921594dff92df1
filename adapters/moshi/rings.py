"""One clock per transformer: its layers' rings advance together, so their bookkeeping is done once.

Every self-attention layer of a streaming transformer owns a ``RingKVCache`` with its own
``end_offset`` and, each step, derives from it the slots to write and every slot's position:
about fifteen small integer kernels a layer (``arange``, ``%``, ``where``, an in-place update),
which on the 7B are about a quarter of a frame's kernels. All layers of one transformer hold the
same value there (they are stepped, masked and reset together), so :func:`share_ring_clocks`
gives them one clock: the first layer's ring computes the write slots and positions, as the
vendor's code does, and advances the shared ``end_offset``; the others write their keys and
values at those slots and return those positions. Keys, values, positions and so every output
are the vendor's, bit for bit (integer arithmetic on equal values); only the number of kernels
changes.

Constraints (checked where cheap):

* the transformer's layers run in order, each once a step (``StreamingTransformer.forward``);
* one batch row per stream, and the same exec mask on every layer (``set_exec_mask`` sets it on
  all of them);
* installed after ``streaming()`` is entered, which creates the rings; leaving it drops them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["share_ring_clocks"]


class _Clock:
    """What the leading ring computed this step: the write slots ``(B, T)`` and positions."""

    slots: Tensor
    positions: Tensor


def share_ring_clocks(*models: Any) -> int:
    """Give each streaming transformer under ``models`` one ring clock; the number of rings
    that now follow a leader instead of keeping their own."""
    from moshi.modules.transformer import RingKVCache, StreamingTransformer

    followers = 0
    for model in models:
        for transformer in model.modules():
            if not isinstance(transformer, StreamingTransformer):
                continue
            rings = [
                state.kv_cache
                for layer in transformer.layers
                if (state := getattr(layer.self_attn, "_streaming_state", None)) is not None
                and isinstance(state.kv_cache, RingKVCache)
            ]
            if len(rings) < 2:
                continue
            clock = _Clock()
            leader, *rest = rings
            _lead(leader, clock)
            for ring in rest:
                _follow(ring, leader, clock)
            followers += len(rest)
    return followers


_LEADERS: dict[type, type] = {}
_FOLLOWERS: dict[type, type] = {}


def _lead(ring: Any, clock: _Clock) -> None:
    """The vendor's ``complete``, noting the step's write slots and positions on ``clock``."""
    cls = type(ring)
    if cls not in _LEADERS:

        def complete(self: Any, k: Tensor, v: Tensor, exec_mask: Tensor) -> Any:
            end = self.end_offset
            steps = torch.arange(k.shape[2], device=end.device, dtype=end.dtype)
            self.clock.slots = (steps + end.view(-1, 1)) % self.capacity
            result = cls.complete(self, k, v, exec_mask)
            self.clock.positions = result.positions
            return result

        _LEADERS[cls] = type(f"Leading{cls.__name__}", (cls,), {"complete": complete})
    ring.clock = clock
    ring.__class__ = _LEADERS[cls]


def _follow(ring: Any, leader: Any, clock: _Clock) -> None:
    """Write keys and values at the leader's slots (as the vendor's ``complete`` writes them),
    return its positions; the leader's ``end_offset`` becomes this ring's too, so resetting any
    ring resets the one clock."""
    from moshi.modules.transformer import KVCacheResult

    if ring.capacity != leader.capacity or ring.respect_exec_mask != leader.respect_exec_mask:
        raise ValueError("a transformer's rings differ in capacity or exec-mask handling")
    cls = type(ring)
    if cls not in _FOLLOWERS:

        def complete(self: Any, k: Tensor, v: Tensor, exec_mask: Tensor) -> Any:
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

        _FOLLOWERS[cls] = type(f"Following{cls.__name__}", (cls,), {"complete": complete})
    ring.end_offset = leader.end_offset
    ring.clock = clock
    ring.__class__ = _FOLLOWERS[cls]

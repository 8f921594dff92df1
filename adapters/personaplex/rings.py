"""PersonaPlex's rings: once full, the oldest slot is never attended, as its fork's ring does.

``moshi`` 0.2.13's ``RingKVCache.complete`` gives each slot its step from the last one written
(``last_offset = end_offset + T - 1``, before the counter moves): a full ring holds the last
``capacity`` steps and every query of the step sees all of them (``delta < context``, the
context being the capacity for Mimi's and the temporal transformer's). PersonaPlex's fork
(NVIDIA/personaplex ``moshi/moshi/modules/transformer.py``, ``RingKVCache.complete``, at the
commit we compare with) advances the counter first and derives the positions from it
(``end_offset + delta`` where ``delta = slot - end_offset % capacity <= 0``): the slot holding the
oldest step (``end_offset - capacity``) is labelled ``end_offset``, a step in the future, so its
causal mask (``delta >= 0``) hides it from every query once the ring is full. Its attention sees
``capacity - 1`` steps from then on (``capacity - T`` for the step's first query), ours
``capacity``.

Where that shows: Mimi's transformers (context 250 at 25 Hz, two steps a frame) fill their rings
at the 250th step, so PersonaPlex's own Mimi parts from ``moshi``'s at frame 124 (0-based; its
encoder's codes and its decoder's speech alike, eager or graphed); the temporal transformer (3000)
after 3000 steps, the prompt phase included. The depformer's ring (16, one slot a codebook)
would fill at its 16th step, which we never compute (the user's codebooks are given).

:func:`personaplex_rings` makes every ring under the models a :func:`ring_class` ring: the
vendor's ``complete`` (the same writes, the same counter), its positions then the fork's. It must
run once ``streaming()`` is entered (which makes the rings) and before the clocks are shared
(:func:`adapters.moshi.clock.share_clocks` subclasses the ring's class: the leader derives the
fork's positions and mask once a step for every layer). The Moshi family keeps ``moshi``'s rings:
its reference is ``moshi``'s own loop.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from torch import Tensor

__all__ = ["fork_positions", "personaplex_rings", "ring_class"]


def fork_positions(end_offset: Tensor, capacity: int) -> Tensor:
    """Each slot's step as the fork labels it, ``end_offset`` being the counter once the step's
    keys are written ((B,) or (1,)): ``(B, capacity)``, ``-1`` for an empty slot."""
    end = end_offset.view(-1, 1)
    slots = torch.arange(capacity, device=end.device, dtype=torch.long)
    delta = slots - end % capacity
    positions = torch.where(delta <= 0, end + delta, end + delta - capacity)
    return torch.where(slots >= end, torch.full_like(positions, -1), positions)


@cache
def ring_class() -> type:
    """``PersonaPlexRingKVCache``: ``moshi``'s ring with the fork's positions (made once)."""
    from moshi.modules.transformer import KVCacheResult, RingKVCache

    def complete(self: Any, k: Tensor, v: Tensor, exec_mask: Tensor) -> Any:
        keys, values, _ = RingKVCache.complete(self, k, v, exec_mask)
        return KVCacheResult(keys, values, fork_positions(self.end_offset, self.capacity))

    return type("PersonaPlexRingKVCache", (RingKVCache,), {"complete": complete})


def personaplex_rings(*models: Any) -> int:
    """Give every streaming attention's ring under ``models`` the fork's positions; the number
    of rings. Before the clocks are shared (a ring already clocked is refused)."""
    from moshi.modules.transformer import RingKVCache, StreamingMultiheadAttention

    ours = ring_class()
    rings = [
        state.kv_cache
        for model in models
        for module in model.modules()
        if isinstance(module, StreamingMultiheadAttention)
        and (state := getattr(module, "_streaming_state", None)) is not None
        and isinstance(state.kv_cache, RingKVCache)
    ]
    for ring in rings:  # all checked before any is changed
        if type(ring) not in (RingKVCache, ours):
            raise ValueError(
                f"a {type(ring).__name__}: PersonaPlex's rings go in before the clocks"
            )
    for ring in rings:
        ring.__class__ = ours
    return len(rings)

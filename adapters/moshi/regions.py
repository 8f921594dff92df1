"""The ring regions: each declared ring region is one allocation, the vendor's rings its slots.

``moshi`` gives every streaming attention a ``RingKVCache`` of its own tensor when streaming
starts. The caching allocator rounds each allocation over 10 MiB up to a whole 2-MiB page, so at
the released size each temporal layer's ring (46.875 MiB) took a 48-MiB segment: 36 MiB a
session that the ``lm_kv`` region does not declare (on the H200, 2026-12-03: a later session took
1,568 MiB of device memory against 1,516.1 allocated). Here a region is one tensor of the plan's
shape (``RegionPlan.demand_shape``: layers x the ring's own shape; ``lm_kv``'s 1,500 MiB is a
whole number of pages), made when its first ring is, with that ring's dtype and device (the
declared dtype on CUDA; the CPU's rings are float32). Every ring the vendor makes while streaming
starts moves into the region's next place as it is made: its values (the vendor's zeros) are
copied in and its own tensor goes at once, so the extra memory is one ring, and its freed
segment serves the next ring. Values and addresses then never move again (the rings are written
in place).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from adapters.face import FamilyError
from engine.contract import Declaration
from engine.plan import make_plan

__all__ = ["RING_REGIONS", "ring_shapes", "rings_in"]

RING_REGIONS = ("mimi_kv", "lm_kv", "depformer_kv")


def ring_shapes(declaration: Declaration, values: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """Each ring region's declared shape at ``values`` (the plan's demand shape)."""
    plan = make_plan(declaration, values)
    return {name: plan.region(name).demand_shape for name in RING_REGIONS}


@contextmanager
def rings_in(root: Any, region: str, shape: tuple[int, ...], owner: str) -> Iterator[None]:
    """Inside, every ring a streaming attention under ``root`` makes (``root.streaming(...)``
    entered inside) is carved, in order, from one tensor of ``shape`` (region ``region`` of
    ``owner``.yaml). A model smaller than declared (a checkpoint's codec may be) leaves the
    region's tail unused: its rings then move once more, into one tensor of exactly theirs.

    Raises :class:`FamilyError` (setting ``checkpoint``) when the rings take more than the
    region holds: the model is larger than the declared one.
    """
    from moshi.modules.transformer import StreamingMultiheadAttention

    declared = math.prod(shape)
    region_tensor: list[Tensor] = []  # flat, made with the first ring (its dtype and device)
    rings: list[Any] = []
    used = [0]

    def moving(vendor: Any) -> Any:
        def init(batch_size: int) -> Any:
            state = vendor(batch_size)
            ring = getattr(state, "kv_cache", None)
            if ring is None:
                return state
            cache: Tensor = ring.cache
            start, end = used[0], used[0] + cache.numel()
            if end > declared:
                raise FamilyError(
                    f"the model's {region} rings take more than the {declared:,} values "
                    f"{owner}.yaml's {region} region holds {tuple(shape)}: declare the "
                    "checkpoint's values",
                    "checkpoint",
                )
            if not region_tensor:
                region_tensor.append(torch.zeros(declared, dtype=cache.dtype, device=cache.device))
            ring.cache = region_tensor[0][start:end].view(cache.shape)
            ring.cache.copy_(cache)
            used[0] = end
            rings.append(ring)
            return state

        return init

    attentions = [m for m in root.modules() if isinstance(m, StreamingMultiheadAttention)]
    for module in attentions:  # an instance attribute, above the class's method
        module.__dict__["_init_streaming_state"] = moving(module._init_streaming_state)
    try:
        yield
    finally:
        for module in attentions:
            del module.__dict__["_init_streaming_state"]
    if rings and used[0] < declared:
        exact = region_tensor.pop()[: used[0]].clone()
        start = 0
        for ring in rings:
            n = ring.cache.numel()
            ring.cache = exact[start : start + n].view(ring.cache.shape)
            start += n

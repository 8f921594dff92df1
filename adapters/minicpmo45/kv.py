"""The backbone's KV carry: one buffer at one address for a whole conversation (the state rule).

The vendor's decoder keeps a transformers ``DynamicCache`` that grows by ``torch.cat`` each
forward and is rebuilt when its sliding window moves. Ours is one tensor
``[layers, 2, kv_heads, capacity, head_dim]`` allocated at load, written in place by the step
(:mod:`adapters.minicpmo45.llm_step`) at the write slot; live data is always ``[0, length)``.

The vendor's code still reads the cache (its ``get_cache_length`` and, when its window slides,
``drop_tokens_from_cache``): :class:`CarryView` is what it sees as ``decoder.cache``, a legacy
tuple-of-layers face over the carry's live views, and :meth:`KVCarry.load` takes back the
values the vendor's upkeep computed (a copy into the same buffer, counted by the caller).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

__all__ = ["CarryView", "KVCarry", "attribute", "cache_pairs", "round_up"]


class KVCarry:
    """``[layers, 2, kv_heads, capacity, head_dim]`` at one address; ``length`` live slots."""

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        capacity: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"KV carry capacity {capacity}: must be > 0")
        self.buffer = torch.zeros(
            (layers, 2, kv_heads, capacity, head_dim), dtype=dtype, device=device
        )
        self.layers, self.kv_heads, self.capacity, self.head_dim = (
            layers,
            kv_heads,
            capacity,
            head_dim,
        )
        self.length = 0
        self.extents: tuple[int, ...] = (capacity,)
        """The attended extents (:meth:`ladder`): the capacity alone until one is set."""

    def ladder(self, step: int) -> None:
        """Attend every multiple of ``step`` below the capacity, and the capacity."""
        if step <= 0:
            raise ValueError(f"extent step {step}: must be > 0")
        self.extents = (*range(step, self.capacity, step), self.capacity)

    def extent(self, n: int) -> int:
        """The least extent that holds the live slots and ``n`` more (a call writing ``n``)."""
        end = self.length + n
        return next((e for e in self.extents if e >= end), self.capacity)

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def fits(self, n: int) -> bool:
        """Whether ``n`` more slots fit."""
        return self.length + n <= self.capacity

    def pairs(self) -> tuple[tuple[Tensor, Tensor], ...]:
        """The live ``(key, value)`` of each layer as ``[1, kv_heads, length, head_dim]`` views."""
        live = self.buffer[:, :, :, : self.length]
        return tuple((live[i, 0].unsqueeze(0), live[i, 1].unsqueeze(0)) for i in range(self.layers))

    def load(self, pairs: list[tuple[Tensor, Tensor]]) -> None:
        """Take a cache's values (``[1, kv_heads, n, head_dim]`` per layer) into the buffer."""
        if len(pairs) != self.layers:
            raise ValueError(f"a cache of {len(pairs)} layers for a carry of {self.layers}")
        n = int(pairs[0][0].shape[-2]) if pairs else 0
        if n > self.capacity:
            raise ValueError(f"a cache of {n} slots for a carry of {self.capacity}")
        for i, (k, v) in enumerate(pairs):
            self.buffer[i, 0, :, :n].copy_(k[0])
            self.buffer[i, 1, :, :n].copy_(v[0])
        self.length = n


class CarryView:
    """What the vendor's decoder sees as its cache: ``cache[i] == (key_i, value_i)`` (live views).

    transformers' legacy cache form, which the vendor's ``get_cache_length`` reads as
    ``cache[0][0].shape[2]``. Views are made on access, so they follow ``carry.length``.
    """

    def __init__(self, carry: KVCarry) -> None:
        self.carry = carry

    def __len__(self) -> int:
        return self.carry.layers

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        live = self.carry.buffer[i, :, :, : self.carry.length]
        return live[0].unsqueeze(0), live[1].unsqueeze(0)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return (self[i] for i in range(len(self)))


def cache_pairs(cache: Any) -> list[tuple[Tensor, Tensor]]:
    """``(key, value)`` per layer of a transformers cache in any of its forms.

    4.x ``DynamicCache`` (``key_cache``/``value_cache`` lists), 5.x (``layers[i].keys``), the
    legacy tuple, or a :class:`CarryView`.
    """
    if hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return [(k, v) for k, v in cache]


def round_up(n: int, to: int) -> int:
    """``n`` rounded up to a multiple of ``to`` (a carry's slots: the declaration's
    ``round_to``)."""
    return -(-n // to) * to


def attribute(obj: Any, dotted: str) -> Any:
    """``obj.a.b.c`` for ``"a.b.c"`` (the declaration names where the checkpoint keeps a value)."""
    for name in dotted.split("."):
        obj = getattr(obj, name)
    return obj

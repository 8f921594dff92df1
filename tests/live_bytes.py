"""Live tensor bytes on the CPU, counted the way the CUDA allocator's ``allocated`` counter is.

torch's CPU allocator keeps no statistics, so :class:`LiveBytes` (a dispatch mode) sees every
storage an operator returns while it is active, adds its bytes, and takes them off when the
storage is freed (storages keep their Python object alive as long as they live, so a finalizer
fires exactly then). ``current`` and ``peak`` are bytes over what existed before the mode; an
operator's own scratch space (freed before it returns) is not seen, on either side of a
comparison.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveBytes(TorchDispatchMode):
    """``with LiveBytes() as live: ...`` then read ``live.current`` and ``live.peak`` (bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def reset_peak(self) -> None:
        """Start a new peak from what is live now (``torch.cuda.reset_peak_memory_stats``)."""
        self.peak = self.current

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._see(leaf.untyped_storage())
        return out

    def _see(self, storage: torch.UntypedStorage) -> None:
        key, size = id(storage), storage.nbytes()
        if key in self._live or size == 0:
            return
        self._live[key] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key)

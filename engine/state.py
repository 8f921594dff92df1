"""Prompt-only state shared copy-on-write across turns and sessions (paper §2.2, the state rule).

The stock path resets a stream to a *clone* of the prompt-only state at every turn. Here the
prompt-only state is captured once into a :class:`PromptState`, and every carry of every session
resets from it by writing its tensors into the carry's own buffer (``engine/carry.py``): the
shared tensors are read, never written, so nobody needs a private copy.

Read-only is a contract, not enforced by torch: :meth:`PromptState.fingerprint` detects an
accidental write (tests compare it before and after a stream). Per-session snapshots are
``engine/session.py``'s business.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType

import torch
from torch import Tensor

from engine.carry import Carry
from engine.contract import Order


def region_bytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    """Bytes of a dense region of ``shape`` at ``dtype``: ``itemsize * prod(shape)`` (§2.2)."""
    if any(s < 0 for s in shape):
        raise ValueError(f"region_bytes: negative extent in shape {tuple(shape)}: fix the plan")
    return dtype.itemsize * math.prod(shape)


class PromptState(Mapping[str, Tensor]):
    """An immutable set of named prompt-only tensors, shared by every carry that resets from it.

    Args:
        tensors: the prompt-only state, e.g. ``{"estimator_att": ..., "conformer_att": ...}``.
        copy: clone the tensors once at construction (default). Keep it on when the tensors come
            from a model's stream cache: the vendor's caches alias module buffers that any later
            call overwrites (FACTS.md), which would silently change the prompt state under us.

    Constraints: nobody may write the tensors (they are handed out uncopied); the container
    itself is frozen (no new names, no rebinding).
    """

    __slots__ = ("_tensors",)
    _tensors: Mapping[str, Tensor]

    def __init__(self, tensors: Mapping[str, Tensor], *, copy: bool = True) -> None:
        owned = {n: (t.detach().clone() if copy else t.detach()) for n, t in tensors.items()}
        object.__setattr__(self, "_tensors", MappingProxyType(owned))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"PromptState is immutable (tried to set {name!r}): build a new one")

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(
                f"prompt state has no tensor {name!r}; it has {sorted(self._tensors)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}={tuple(t.shape)}" for n, t in self._tensors.items())
        return f"PromptState({shapes})"

    @property
    def nbytes(self) -> int:
        """Bytes held once for all sessions."""
        return sum(region_bytes(t.shape, t.dtype) for t in self._tensors.values())

    def fingerprint(self) -> str:
        """A digest of names, dtypes, shapes and bytes: changes iff someone wrote the state.

        Copies every tensor to the host (test and audit use, not the hot path).
        """
        digest = hashlib.sha256()
        for name in sorted(self._tensors):
            t = self._tensors[name]
            digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            raw = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
            digest.update(raw.numpy().tobytes())
        return digest.hexdigest()

    def carry(
        self, name: str, *, dim: int, prompt: int, history: int, order: Order, capacity: int
    ) -> Carry:
        """A new carry for region ``name`` that resets from this state (no copy of the state)."""
        return Carry(
            self[name], dim=dim, prompt=prompt, history=history, order=order, capacity=capacity
        )

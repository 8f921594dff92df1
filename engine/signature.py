"""Signatures and catalogs: what ExactShapeReplay keys a specialized graph on (paper §3.3).

A :class:`Signature` is everything about one call that can change the kernels it launches:
for every tensor argument its shape, strides, dtype and device; every scalar argument by type
and value; plus an operator's optional ``extra`` key (e.g. the pinned SDPA backend). It is one
hashable value, like vLLM's ``BatchDescriptor``, so the dispatcher can look a call up in a dict.

A :class:`Catalog` is the finite set of signatures an operator may be specialized for, built by
the adapter from the plan BEFORE traffic. Shapes are given without real tensors through
:class:`TensorSpec`, accepted wherever a tensor is::

    spec = TensorSpec((1, 50, 512), torch.float32, "cuda")
    catalog = Catalog([Signature.of((spec, 10, "euler"))])

Keying rules (constraints callers rely on):

- Keyable leaves: tensors (strided layout only), :class:`TensorSpec`, ``None``, ``bool``,
  ``int``, ``float``, ``str``, ``torch.dtype``, ``torch.device``, and tuples/lists of these,
  recursively. Anything else raises :class:`Unkeyable`; the engine sends such a call to eager.
- ``True``, ``1`` and ``1.0`` are different keys (Python hashes them equal); floats key by
  their exact bits (``float.hex``), so ``-0.0 != 0.0`` and ``nan`` matches itself.
- A tuple and a list of the same items are different keys. Positional and keyword passing
  of the same argument are different keys: build the catalog the way the adapter calls.
- Tensor storage offset and address are NOT in the signature: addresses are checked apart,
  per call, for aliased inputs and write-through regions (``engine/replay.py``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

__all__ = ["Catalog", "Signature", "TensorKey", "TensorSpec", "Unkeyable", "key_call"]

#: A top-level argument slot: a position in ``args`` or a keyword name.
Slot = int | str


class Unkeyable(TypeError):
    """An argument the signature cannot key on; the call runs eagerly (miss ``unkeyable``)."""


def _norm_device(device: torch.device | str) -> torch.device:
    """``"cuda"`` means the current CUDA device, as tensors created with it report an index."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        dev = torch.device("cuda", index)
    return dev


def contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``, as torch lays it out (size-0/1 dims too)."""
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(stride))


@dataclass(frozen=True, slots=True)
class TensorKey:
    """The part of a signature one tensor contributes."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: str

    def __str__(self) -> str:
        dims = ",".join(map(str, self.shape))
        return f"{str(self.dtype).removeprefix('torch.')}[{dims}]/{self.stride}@{self.device}"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor described without storage, keyed exactly like a real tensor of that geometry.

    ``stride=None`` means contiguous. Give the stride explicitly for views, e.g. a carry's live
    view (a ``narrow`` of a larger buffer): ``stride=carry.view().stride()``.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device | str
    stride: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        stride = contiguous_stride(shape) if self.stride is None else tuple(self.stride)
        if len(stride) != len(shape):
            raise ValueError(
                f"TensorSpec: stride {stride} has {len(stride)} dims for shape {shape}: "
                "give one stride per dimension, or None for contiguous"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "device", _norm_device(self.device))

    @classmethod
    def like(cls, t: Tensor, *, device: torch.device | str | None = None) -> TensorSpec:
        """The spec of ``t`` (optionally moved to ``device``: e.g. from a ``meta`` tensor)."""
        return cls(tuple(t.shape), t.dtype, device or t.device, tuple(t.stride()))

    def key(self) -> TensorKey:
        assert self.stride is not None, "TensorSpec.stride is filled in __post_init__"
        return TensorKey(self.shape, self.stride, self.dtype, str(self.device))


def _tensor_key(t: Tensor) -> TensorKey:
    if t.layout != torch.strided:
        raise Unkeyable(f"a {t.layout} tensor: only strided tensors are keyed")
    return TensorKey(tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))


def _key(obj: Any, slot: Slot, leaves: list[Tensor], slots: list[Slot]) -> Hashable:
    """The key of one argument; appends its tensors (depth first) to ``leaves``/``slots``."""
    # Order matters: bool is an int; exact types keep True, 1 and 1.0 apart.
    if isinstance(obj, Tensor):
        leaves.append(obj)
        slots.append(slot)
        return _tensor_key(obj)
    if isinstance(obj, TensorSpec):
        return obj.key()
    if obj is None:
        return ("none",)
    if isinstance(obj, bool):
        return ("bool", obj)
    if isinstance(obj, int):
        return ("int", int(obj))
    if isinstance(obj, float):
        return ("float", float(obj).hex())
    if isinstance(obj, str):
        return ("str", str(obj))
    if isinstance(obj, torch.dtype | torch.device):
        return (type(obj).__name__, str(obj))
    if isinstance(obj, tuple | list):
        tag = "tuple" if isinstance(obj, tuple) else "list"
        return (tag, tuple(_key(item, slot, leaves, slots) for item in obj))
    raise Unkeyable(
        f"argument {slot!r} holds a {type(obj).__qualname__}: pass tensors, scalars, "
        "or tuples/lists of them (or close over it in the operator)"
    )


@dataclass(frozen=True, slots=True)
class Signature:
    """One call's key: tensor geometry and scalar values of every argument, plus ``extra``.

    Build it with :meth:`of`; two calls share a specialized graph iff their signatures are equal.
    """

    args: tuple[Hashable, ...]
    kwargs: tuple[tuple[str, Hashable], ...] = ()
    extra: Hashable = field(default=None)

    @classmethod
    def of(
        cls,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        extra: Hashable = None,
    ) -> Signature:
        """The signature of a call ``f(*args, **kwargs)``; tensors may be :class:`TensorSpec`."""
        return key_call(args, kwargs or {}, extra)[0]

    def __str__(self) -> str:
        parts = [_show(a) for a in self.args] + [f"{k}={_show(v)}" for k, v in self.kwargs]
        extra = "" if self.extra is None else f" | {self.extra!r}"
        return f"({', '.join(parts)}{extra})"

    def without_extra(self) -> Signature:
        """This signature with ``extra=None``: the form a shape-only catalog lists."""
        return self if self.extra is None else replace(self, extra=None)


def _show(key: Hashable) -> str:
    """A short human form of one argument's key, for logs and events."""
    if isinstance(key, TensorKey):
        return str(key)
    assert isinstance(key, tuple), f"unexpected key {key!r}"
    if key[0] in ("tuple", "list"):
        inner = ", ".join(_show(k) for k in key[1])
        return f"({inner})" if key[0] == "tuple" else f"[{inner}]"
    if key[0] == "float":
        return repr(float.fromhex(key[1]))
    return "None" if key[0] == "none" else repr(key[1])


def key_call(
    args: Sequence[Any], kwargs: Mapping[str, Any], extra: Hashable = None
) -> tuple[Signature, list[Tensor], list[Slot]]:
    """Key a call: its :class:`Signature`, its tensor leaves in order, and each leaf's slot.

    Keywords are keyed in sorted name order. Raises :class:`Unkeyable` (never anything else
    for a well-formed call) when some argument cannot be keyed.
    """
    leaves: list[Tensor] = []
    slots: list[Slot] = []
    arg_keys = tuple(_key(a, i, leaves, slots) for i, a in enumerate(args))
    kw_keys = tuple((name, _key(kwargs[name], name, leaves, slots)) for name in sorted(kwargs))
    try:
        hash(extra)
    except TypeError as exc:
        raise Unkeyable(f"extra key {extra!r} is unhashable: return a hashable value") from exc
    return Signature(arg_keys, kw_keys, extra), leaves, slots


class Catalog:
    """The finite set of signatures an operator may be specialized for, known before traffic.

    Admission fails closed: a call is admitted only if its signature, or the same signature
    without its ``extra`` key, is listed. :meth:`any` is the explicit opposite (every signature
    admitted), for exploration only; the engine counts what it admits through it.
    """

    def __init__(self, signatures: Iterable[Signature] = (), *, admit_all: bool = False) -> None:
        self._signatures = frozenset(signatures)
        self.admit_all = admit_all

    @classmethod
    def any(cls) -> Catalog:
        """An open catalog: admits every signature (counted as ``open_admissions``)."""
        return cls(admit_all=True)

    @classmethod
    def of_calls(cls, calls: Iterable[Sequence[Any]]) -> Catalog:
        """A catalog from example positional argument tuples (tensors or :class:`TensorSpec`)."""
        return cls(Signature.of(tuple(call)) for call in calls)

    def listed(self, sig: Signature) -> bool:
        """Whether ``sig`` is listed (with or without its ``extra`` key)."""
        return sig in self._signatures or sig.without_extra() in self._signatures

    def admits(self, sig: Signature) -> bool:
        """Whether a call of signature ``sig`` may be specialized."""
        return self.admit_all or self.listed(sig)

    def __contains__(self, sig: object) -> bool:
        return isinstance(sig, Signature) and self.listed(sig)

    def __iter__(self) -> Iterator[Signature]:
        return iter(self._signatures)

    def __len__(self) -> int:
        return len(self._signatures)

    def __repr__(self) -> str:
        kind = "open" if self.admit_all else "closed"
        return f"Catalog({len(self)} signatures, {kind})"

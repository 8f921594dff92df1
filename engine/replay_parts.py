"""The parts under ExactShapeReplay: its records, signature classes, staging and delivery.

``engine/replay.py`` decides; this module and ``engine/capture.py`` (effect probe, capture,
recovery) do. Nothing here counts or logs: failures are raised (:class:`CaptureFailed`) for the
dispatcher to classify.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from engine.signature import Signature, Slot

__all__ = [
    "Binding",
    "CaptureFailed",
    "OpCounters",
    "ReplayError",
    "ReplayEvent",
    "SignatureClass",
    "deliver",
    "poison_targets",
    "resolve_slots",
]

RegionKey = tuple[int, tuple[int, ...], tuple[int, ...], torch.dtype]


# -- records ----------------------------------------------------------------------------------


class ReplayError(RuntimeError):
    """A replay bug surfaced in ``strict`` mode (e.g. a capture attempted after ``seal()``)."""


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """Something the metrics and the trace should show: a capture, invalidation, fallback or
    rejection of one operator's signature class. ``t`` is ``time.perf_counter()``."""

    kind: str  # "capture" | "invalidation" | "fallback" | "rejection"
    op: str
    reason: str
    t: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class OpCounters:
    """One operator's counters since the last ``reset_counters()``.

    ``captures`` counts every capture (re-captures after a drift included); ``fallbacks``
    counts failed captures; ``open_admissions`` classes admitted only by an open catalog;
    ``lane_probes`` classes that took their lane's effect classification instead of an eager
    probe of their own (``engine.graph_lane``).
    """

    hits: int = 0
    misses: dict[str, int] = field(default_factory=dict)
    captures: int = 0
    invalidations: int = 0
    rejections: int = 0
    fallbacks: int = 0
    open_admissions: int = 0
    lane_probes: int = 0
    capture_s: float = 0.0
    capture_bytes: int = 0

    def miss(self, reason: str) -> None:
        self.misses[reason] = self.misses.get(reason, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def sum_dicts(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Sum counter dicts (``misses`` by reason); the ``total`` of :meth:`snapshot`."""
        total: dict[str, Any] = OpCounters().to_dict()
        for entry in entries:
            for key, value in entry.items():
                if key == "misses":
                    for reason, n in value.items():
                        total["misses"][reason] = total["misses"].get(reason, 0) + n
                else:
                    total[key] = total.get(key, 0) + value
        return total


class CaptureFailed(RuntimeError):
    """A capture raised; ``error`` is the cause, ``unrecovered`` says what cleanup could not fix."""

    def __init__(self, error: BaseException, unrecovered: str | None) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error, self.unrecovered = error, unrecovered


@dataclass(slots=True)
class Binding:
    """One captured class: its static inputs, recorded addresses, graph and static outputs."""

    static_args: tuple[Any, ...]
    static_kwargs: dict[str, Any]
    staged: tuple[tuple[int, Tensor], ...]  # (leaf index, static buffer)
    aliased: tuple[tuple[int, int], ...]  # (leaf index, data_ptr at capture)
    regions: tuple[RegionKey, ...]
    region_refs: tuple[Tensor, ...]  # keeps the recorded regions' storage alive
    graph: torch.cuda.CUDAGraph | None = None
    outputs: Any = None
    poison: tuple[tuple[Tensor, float], ...] = ()  # (static output, fill value)

    @classmethod
    def stage(
        cls,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        leaves: list[Tensor],
        aliased: tuple[int, ...],
        regions: tuple[Tensor, ...],
        buffer: Callable[[int, Tensor], Tensor] | None = None,
    ) -> Binding:
        """Allocate a static buffer per non-aliased tensor leaf (same strides) and fill it;
        ``buffer(j, leaf)`` gives leaf ``j``'s buffer instead (a lane's shared one), left as it
        is: another session's replay may read it now, and every replay copies its inputs in.

        Raises if a leaf cannot be staged (e.g. it overlaps itself, as an ``expand`` does).
        """
        static = list(leaves)
        staged = []
        for j, t in enumerate(leaves):
            if j in aliased:
                continue
            if buffer is not None:
                buf = buffer(j, t)
            else:
                buf = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                buf.copy_(t)
            static[j] = buf
            staged.append((j, buf))
        s_args, s_kwargs = _rebuild(args, kwargs, iter(static))
        return cls(
            static_args=s_args,
            static_kwargs=s_kwargs,
            staged=tuple(staged),
            aliased=tuple((j, leaves[j].data_ptr()) for j in aliased),
            regions=cls.region_keys(regions),
            region_refs=regions,
        )

    @staticmethod
    def region_keys(regions: Sequence[Tensor]) -> tuple[RegionKey, ...]:
        """Address and geometry of each write-through region: what must not drift."""
        return tuple((t.data_ptr(), t.shape, t.stride(), t.dtype) for t in regions)

    def static_tensors(self) -> list[Tensor]:
        """Every tensor the graph reads or writes outside its pool."""
        return [*_leaves((self.static_args, self.static_kwargs)), *self.region_refs]


@dataclass(slots=True)
class SignatureClass:
    """The dispatcher's state for one (operator, signature)."""

    sig: Signature
    aliased: tuple[int, ...]  # indices of aliased tensor leaves
    warm: int = 0  # eager warm-up calls since creation or the last invalidation
    probed: bool = False
    device_random: bool = False
    rejected: str | None = None
    invalidations: int = 0
    binding: Binding | None = field(default=None)


# -- pytrees of call arguments and outputs -------------------------------------------------


def _leaves(obj: Any) -> Iterator[Tensor]:
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, tuple | list):
        for item in obj:
            yield from _leaves(item)
    elif isinstance(obj, dict):
        for key in obj:
            yield from _leaves(obj[key])


def _map(obj: Any, fn: Callable[[Tensor], Any]) -> Any:
    """``obj`` with every tensor leaf replaced by ``fn(leaf)`` (tuples, lists, dicts)."""
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        items = [_map(item, fn) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [_map(item, fn) for item in obj]
    if isinstance(obj, dict):
        return {key: _map(value, fn) for key, value in obj.items()}
    return obj


def _rebuild(
    args: tuple[Any, ...], kwargs: dict[str, Any], leaves: Iterator[Tensor]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Substitute ``leaves`` in the order ``key_call`` walks them (args, then sorted keywords)."""
    new_args = tuple(_map(a, lambda _: next(leaves)) for a in args)
    new_kwargs = {name: _map(kwargs[name], lambda _: next(leaves)) for name in sorted(kwargs)}
    return new_args, new_kwargs


def deliver(outputs: Any, copy_out: bool) -> Any:
    """The caller's outputs: fresh copies of static outputs, or the static outputs themselves."""
    return _map(outputs, lambda t: t.clone()) if copy_out else outputs


def poison_targets(binding: Binding) -> tuple[tuple[Tensor, float], ...]:
    """Static outputs to fill before every replay, with their fill value (NaN for floating
    types, the dtype's max for integers): all but those sharing storage with an input or a
    region (an output that is a view of the carry must keep the carry's data) and booleans."""
    held = {t.untyped_storage().data_ptr() for t in binding.static_tensors()}
    targets = []
    for t in _leaves(binding.outputs):
        if t.untyped_storage().data_ptr() in held or t.dtype == torch.bool:
            continue
        fp = t.is_floating_point() or t.is_complex()
        targets.append((t, float("nan") if fp else float(torch.iinfo(t.dtype).max)))
    return tuple(targets)


def resolve_slots(fn: Callable[..., Any], slots: Sequence[Slot]) -> frozenset[Slot]:
    """Aliased argument slots under both spellings (position and name) where ``fn`` allows both."""
    resolved: set[Slot] = set(slots)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: take slots as given
        return frozenset(resolved)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    names = {p.name for p in params}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    for slot in slots:
        if isinstance(slot, str):
            if slot not in names and not var_kw:
                raise ValueError(f"aliased={slot!r}: {fn!r} has no parameter of that name")
            resolved.update(i for i, p in enumerate(positional) if p.name == slot)
        elif slot < len(positional) and positional[slot].kind is not kinds[0]:
            resolved.add(positional[slot].name)
    return frozenset(resolved)

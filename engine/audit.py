"""The shadow auditor: the stock concatenation beside every carry retention (paper §3.6).

In audit mode each carry write is shadowed by the stock path the declaration describes
(:func:`engine.carry.stock_retention` on ``torch.cat``), the two are compared bit for bit, and
the auditor counts agreements and the distinct buffer addresses it saw. The first divergence is
localized to a region, a call and the retained slice holding the first mismatching frame:
enough to name the routine at fault (an append-ordered carry under a prepend declaration first
diverges at the call whose eviction reaches the prompt).

Audit mode is opt-in and allocates (the shadow path is the stock path). Off, it costs nothing:
:func:`audited` hands back the bare carry, and a disabled :class:`Auditor` only delegates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from engine.carry import Carry, RetentionRule
from engine.contract import Order


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a carry first left the stock path.

    ``call`` is the 0-based index among the region's audited retentions (resets not counted);
    ``slice`` is the ``[start, stop)`` range along ``dim`` of the retained run (``part``) that
    holds the first mismatching frame, ``source`` the range of the post-call cache it came from,
    ``index`` the first mismatching element. ``part == "extent"`` when the extents differ and
    every common frame agrees.
    """

    region: str
    call: int
    dim: int
    slice: tuple[int, int]
    part: str
    source: tuple[int, int]
    index: tuple[int, ...]
    expected_extent: int
    actual_extent: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line for a log or a trace event: the region, the call and the retained slice."""
        a, b = self.slice
        s, t = self.source
        where = (
            f"extent {self.actual_extent}, expected {self.expected_extent} (frames [{a}, {b}) "
            f"differ; every common frame agrees)"
            if self.part == "extent"
            else f"first mismatch at element {list(self.index)}, in the retained {self.part} run "
            f"[{a}, {b}) on dim {self.dim}, taken from H[{s}:{t}]"
        )
        return f"{self.region}: retention call {self.call} left the stock retention: {where}"


class AuditError(AssertionError):
    """A strict auditor saw a carry diverge from the stock path."""


@dataclass(frozen=True, slots=True)
class RegionReport:
    """One region's audit counters."""

    retentions: int
    evictions: int
    agreements: int
    resets: int
    distinct_addresses: int
    first_divergence: Divergence | None

    def to_dict(self) -> dict[str, Any]:
        d = self.first_divergence
        return {**asdict(self), "first_divergence": None if d is None else d.to_dict()}


@dataclass(frozen=True, slots=True)
class AuditReport:
    """Per-region counters and the stream's first divergence (earliest in time), if any."""

    regions: dict[str, RegionReport]
    first_divergence: Divergence | None

    @property
    def retentions(self) -> int:
        return sum(r.retentions for r in self.regions.values())

    @property
    def agreements(self) -> int:
        return sum(r.agreements for r in self.regions.values())

    @property
    def divergences(self) -> int:
        """Audited retentions that did not agree with the stock path."""
        return self.retentions - self.agreements

    @property
    def resets(self) -> int:
        return sum(r.resets for r in self.regions.values())

    @property
    def ok(self) -> bool:
        """Every audited retention agreed with the stock path."""
        return self.first_divergence is None

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-serializable dict for the session trace."""
        d = self.first_divergence
        return {
            "retentions": self.retentions,
            "agreements": self.agreements,
            "divergences": self.divergences,
            "regions": {name: r.to_dict() for name, r in self.regions.items()},
            "first_divergence": None if d is None else d.to_dict(),
        }


@dataclass(slots=True)
class _Region:
    declared: RetentionRule | None = None
    retentions: int = 0
    evictions: int = 0
    agreements: int = 0
    resets: int = 0
    addresses: set[int] = field(default_factory=set)
    first_divergence: Divergence | None = None

    def report(self) -> RegionReport:
        return RegionReport(
            self.retentions,
            self.evictions,
            self.agreements,
            self.resets,
            len(self.addresses),
            self.first_divergence,
        )


class Auditor:
    """Shadows carry writes with the declared stock retention and compares them bit for bit.

    Each region is audited against the retention declared for it with :meth:`declare`, or the
    carry's own retention when none was declared (that checks the in-place implementation
    against the stock concatenation of the same policy). ``strict`` raises :class:`AuditError`
    at the first divergence instead of only recording it. ``on_divergence`` is called with each
    region's first divergence when it is found (before a strict auditor raises): a session logs
    it and records it in the period's trace; later divergences of the region are only counted.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        strict: bool = False,
        on_divergence: Callable[[Divergence], None] | None = None,
    ) -> None:
        self.enabled = enabled
        self.strict = strict
        self.on_divergence = on_divergence
        self._regions: dict[str, _Region] = {}
        self._first: Divergence | None = None

    def declare(self, name: str, retention: RetentionRule) -> None:
        """Audit region ``name`` against ``retention`` (the declaration's, not the carry's)."""
        self._region(name).declared = retention

    def retain(self, name: str, carry: Carry, h: Tensor) -> Tensor:
        """``carry.retain(h)``, shadowed by the stock retention of ``h``."""
        if not self.enabled:
            return carry.retain(h)
        return self._check(name, carry, h, carry.retain(h))

    def append(self, name: str, carry: Carry, new: Tensor) -> Tensor:
        """``carry.append(new)``, shadowed by the stock retention of the declared concatenation."""
        if not self.enabled:
            return carry.append(new)
        declared = self._declared(name, carry)
        live = carry.view().clone()  # the append overwrites it
        pair = [new, live] if declared.order is Order.NEWEST_FIRST else [live, new]
        return self._check(name, carry, torch.cat(pair, dim=declared.dim), carry.append(new))

    def commit(self, name: str, carry: Carry, n: int) -> Tensor:
        """``carry.commit(n)``, shadowed by the stock retention of the reserved window."""
        if not self.enabled:
            return carry.commit(n)
        h = carry.window(n).clone()  # the commit overwrites it
        return self._check(name, carry, h, carry.commit(n))

    def settle(self, name: str, carry: Carry, extent: int, live: Tensor | None = None) -> Tensor:
        """``carry.settle(extent)``, shadowed by the stock path of the write-through call.

        The operator has written the post-call cache H (``extent`` frames) at the front of the
        buffer; ``live`` is a copy of ``carry.view()`` taken before it did. With ``live`` the
        shadow is the stock path whole: the declared concatenation of H's new frames with
        ``live`` (``cat([new, live])`` newest-first, ``cat([live, new])`` oldest-first), then the
        stock retention, so an operator that wrote its new frames at the wrong end or over
        frames it had to keep diverges too. Without it the shadow is the stock retention of H
        as the operator left it (the carry's in-place retention alone is checked).
        """
        if not self.enabled:
            return carry.settle(extent)
        written = carry.window(extent - carry.extent)  # H, a view the settle moves frames in
        if live is None:
            h = written.clone()
        else:
            declared = self._declared(name, carry)
            dim, old = declared.dim, live.shape[declared.dim]
            if old != carry.extent:
                raise ValueError(
                    f"audit.settle: live has {old} frames, the carry {carry.extent}: pass a copy "
                    "of carry.view() taken right before the operator wrote into the carry"
                )
            n = extent - old
            pair = (
                [written.narrow(dim, 0, n), live]
                if declared.order is Order.NEWEST_FIRST
                else [live, written.narrow(dim, old, n)]
            )
            h = torch.cat(pair, dim=dim)  # a new tensor: the settle cannot move its frames
        return self._check(name, carry, h, carry.settle(extent))

    def reset(self, name: str, carry: Carry) -> Tensor:
        """``carry.reset()``, counted, with the carry's address recorded."""
        out = carry.reset()
        if self.enabled:
            region = self._region(name)
            region.resets += 1
            region.addresses.add(carry.data_ptr())
        return out

    def report(self) -> AuditReport:
        """A snapshot of the counters so far."""
        regions = {name: r.report() for name, r in self._regions.items()}
        return AuditReport(regions, self._first)

    # -- internals --------------------------------------------------------------------------

    def _region(self, name: str) -> _Region:
        return self._regions.setdefault(name, _Region())

    def _declared(self, name: str, carry: Carry) -> RetentionRule:
        return self._region(name).declared or carry.retention

    def _check(self, name: str, carry: Carry, h: Tensor, actual: Tensor) -> Tensor:
        region, declared = self._region(name), self._declared(name, carry)
        call = region.retentions
        region.retentions += 1
        region.addresses.add(carry.data_ptr())
        extent = h.shape[declared.dim]
        region.evictions += extent > declared.bound
        divergence = _localize(name, call, declared, extent, declared.apply(h), actual)
        if divergence is None:
            region.agreements += 1
            return actual
        if region.first_divergence is None:
            region.first_divergence = divergence
            if self._first is None:
                self._first = divergence
            if self.on_divergence is not None:
                self.on_divergence(divergence)
        if self.strict:
            raise AuditError(f"carry diverged from the stock retention: {divergence}")
        return actual


class CarryLike(Protocol):
    """What a stream writes a carry through: a :class:`Carry`, or an :class:`AuditedCarry`."""

    @property
    def extent(self) -> int: ...

    def retain(self, h: Tensor) -> Tensor: ...
    def append(self, new: Tensor) -> Tensor: ...
    def reserve(self, n: int) -> Tensor: ...
    def window(self, n: int) -> Tensor: ...
    def commit(self, n: int) -> Tensor: ...
    def settle(self, extent: int) -> Tensor: ...
    def reset(self) -> Tensor: ...
    def view(self) -> Tensor: ...
    def data_ptr(self) -> int: ...


class AuditedCarry:
    """A carry whose writes go through an :class:`Auditor` under one region name.

    It keeps the shadow's own copy of the carry's live frames, taken after each write it makes
    (and when it is made), so a write-through :meth:`settle` is shadowed by the whole stock path:
    the declared concatenation of the new frames with that copy, then the stock retention (see
    :meth:`Auditor.settle`). Write the carry only through this wrapper while it audits.
    """

    def __init__(self, carry: Carry, name: str, auditor: Auditor) -> None:
        self.carry, self.name, self.auditor = carry, name, auditor
        self._live = carry.view().clone()

    def retain(self, h: Tensor) -> Tensor:
        return self._shadowed(self.auditor.retain(self.name, self.carry, h))

    def append(self, new: Tensor) -> Tensor:
        return self._shadowed(self.auditor.append(self.name, self.carry, new))

    def reserve(self, n: int) -> Tensor:
        return self.carry.reserve(n)

    def window(self, n: int) -> Tensor:
        return self.carry.window(n)

    def commit(self, n: int) -> Tensor:
        return self._shadowed(self.auditor.commit(self.name, self.carry, n))

    def settle(self, extent: int) -> Tensor:
        return self._shadowed(self.auditor.settle(self.name, self.carry, extent, self._live))

    def reset(self) -> Tensor:
        return self._shadowed(self.auditor.reset(self.name, self.carry))

    def view(self) -> Tensor:
        return self.carry.view()

    def data_ptr(self) -> int:
        return self.carry.data_ptr()

    @property
    def extent(self) -> int:
        return self.carry.extent

    def _shadowed(self, view: Tensor) -> Tensor:
        self._live = view.clone()
        return view


def audited(carry: Carry, name: str, auditor: Auditor | None) -> CarryLike:
    """The carry itself when auditing is off (zero cost), else an :class:`AuditedCarry`.

    The one place a stream decides between the bare and the shadowed write: it holds what this
    returns and writes through it, audit on or off.
    """
    if auditor is None or not auditor.enabled:
        return carry
    return AuditedCarry(carry, name, auditor)


def _bits(t: Tensor) -> Tensor:
    """``t`` reinterpreted as integers of its width: compare bits, so NaN == NaN and -0 != 0."""
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    if (t.is_floating_point() or t.is_complex()) and t.element_size() in ints:
        return t.view(ints[t.element_size()])
    return t


def _localize(
    region: str, call: int, declared: RetentionRule, h_extent: int, expected: Tensor, actual: Tensor
) -> Divergence | None:
    """The first frame (then element) where ``actual`` differs from ``expected``, or None."""
    dim = declared.dim % expected.dim()
    e_ext, a_ext = expected.shape[dim], actual.shape[dim]
    common = min(e_ext, a_ext)
    same_rest = (
        expected.shape[:dim] + expected.shape[dim + 1 :]
        == actual.shape[:dim] + actual.shape[dim + 1 :]
    )
    if not same_rest:
        common = 0  # nothing comparable: report the whole extent
    index: tuple[int, ...] | None = None
    if common and expected.numel():
        mask = _bits(expected.narrow(dim, 0, common)) != _bits(actual.narrow(dim, 0, common))
        hits = mask.nonzero()  # row-major order; we want the smallest frame first
        if hits.numel():
            first = hits[hits[:, dim].argmin()] if dim else hits[0]
            index = tuple(int(i) for i in first.tolist())
    if index is None:
        if e_ext == a_ext and same_rest:
            return None
        index = tuple(common if i == dim else 0 for i in range(expected.dim()))
        return Divergence(
            region,
            call,
            dim,
            (common, max(e_ext, a_ext)),
            "extent",
            (common, h_extent),
            index,
            e_ext,
            a_ext,
        )
    frame = index[dim]
    span = next(s for s in declared.spans(h_extent) if s.at <= frame < s.at + s.length)
    return Divergence(
        region,
        call,
        dim,
        (span.at, span.at + span.length),
        span.part,
        (span.src, span.src + span.length),
        index,
        e_ext,
        a_ext,
    )

"""The carry: a region's retained cache at one invariant address (paper §2.2, eq. 3).

The stock path applies a region's retention by concatenation, allocating a fresh tensor per
chunk. The carry writes the same values into one buffer allocated at construction, so its
``data_ptr()`` never changes over a stream, turn resets included. Both disciplines produce
elementwise-identical caches; :func:`stock_retention` is the stock one, kept as the reference
that tests and the shadow auditor (``engine/audit.py``) compare against.

Retention along the clock dimension ``dim`` of a live cache ``H`` of extent ``L``, keeping
``prompt`` frames of the prompt and ``history`` frames of history, only when
``L > prompt + history`` (otherwise ``H`` is kept whole):

- ``Order.OLDEST_FIRST`` (``H = cat([C, new])``): retained = ``H[:prompt] ‖ H[L-history:]``
- ``Order.NEWEST_FIRST`` (``H = cat([new, C])``): retained = ``H[:history] ‖ H[L-prompt:]``

Slices are taken by start index and length, so a count of 0 keeps nothing (Python's
``H[-0:]`` would keep everything).

Constraints (the contract a replay engine relies on):

- The buffer is allocated once, in ``__init__``; no method allocates device memory afterwards
  (views made by ``narrow`` share the buffer's storage). Every method is therefore capturable in
  a CUDA graph once its shapes are fixed, but the extent is host state: a graph replays the
  device copies of the call it captured, so capture only calls whose extent before and after
  are equal (the steady state, where retention holds the extent at ``prompt + history``).
- Live data always starts at offset 0 of the buffer, for both orders, so :meth:`Carry.view`
  has the buffer's base pointer.
- The carry never writes the base (prompt-only) tensor it was built from: that tensor is shared
  copy-on-write by every carry of every session.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from engine.contract import Order, Region, RetentionPolicy

Part = Literal["whole", "prompt", "history"]
Source = Literal["live", "new", "h"]


class RetainedRun(NamedTuple):
    """One retained run of frames: ``out[at : at+length] = H[src : src+length]``."""

    at: int
    src: int
    length: int
    part: Part


@dataclass(frozen=True, slots=True)
class RetentionRule:
    """A region's retention, evaluated: ``prompt_plus_history`` along clock dimension ``dim``.

    The concrete form of ``engine.contract.Retention`` for one region and configuration. A
    sliding window of ``W`` frames is ``RetentionRule(dim, 0, W, Order.OLDEST_FIRST)``.
    """

    dim: int
    prompt: int
    history: int
    order: Order

    def __post_init__(self) -> None:
        if self.prompt < 0 or self.history < 0:
            raise ValueError(
                f"retention counts must be >= 0, got prompt={self.prompt} "
                f"history={self.history}: fix the region's declaration"
            )
        # Accept the declaration's plain strings ("newest_first") as well as the enum.
        object.__setattr__(self, "order", Order(self.order))

    @property
    def bound(self) -> int:
        """The extent retention holds a region at once it fires: ``prompt + history``."""
        return self.prompt + self.history

    def spans(self, extent: int) -> tuple[RetainedRun, ...]:
        """The retained runs of a cache of ``extent`` frames, in output order (no empty runs)."""
        return retained_spans(extent, self.prompt, self.history, self.order)

    def apply(self, h: Tensor) -> Tensor:
        """The stock retention of ``h`` (allocating): see :func:`stock_retention`."""
        return stock_retention(h, self.dim, self.prompt, self.history, self.order)


def declared_retention(region: Region, env: Mapping[str, int]) -> RetentionRule:
    """A declared region's retention at operating point ``env`` (``Declaration.values``), as
    the :class:`RetentionRule` a carry of that region keeps and an auditor checks it against.

    ``prompt_plus_history`` keeps the declared order and counts; a ``sliding_window`` of ``W``
    is ``RetentionRule(dim, 0, W, OLDEST_FIRST)``; ``dim`` is the region's clock axis. A
    ``ring`` never trims: it has no rule.
    """
    retention, dim = region.retention, region.clock_axis
    if retention.policy is RetentionPolicy.PROMPT_PLUS_HISTORY:
        assert retention.prompt is not None and retention.history is not None, "validated at load"
        assert retention.order is not None, "validated at load"
        return RetentionRule(
            dim, retention.prompt.evaluate(env), retention.history.evaluate(env), retention.order
        )
    if retention.policy is RetentionPolicy.SLIDING_WINDOW:
        assert retention.window is not None, "validated at load"
        return RetentionRule(dim, 0, retention.window.evaluate(env), Order.OLDEST_FIRST)
    raise ValueError(
        f"region {region.name}: a {retention.policy} retention never trims, so it has no rule to "
        "carry or shadow; use a prompt_plus_history or sliding_window region"
    )


@functools.lru_cache(maxsize=1024)
def retained_spans(extent: int, prompt: int, history: int, order: Order) -> tuple[RetainedRun, ...]:
    """The runs of ``H`` (extent ``extent``) that retention keeps, in output order."""
    order = Order(order)
    if extent <= prompt + history:
        return (RetainedRun(0, 0, extent, "whole"),) if extent else ()
    if order is Order.OLDEST_FIRST:
        spans = (
            RetainedRun(0, 0, prompt, "prompt"),
            RetainedRun(prompt, extent - history, history, "history"),
        )
    else:
        spans = (
            RetainedRun(0, 0, history, "history"),
            RetainedRun(history, extent - prompt, prompt, "prompt"),
        )
    return tuple(s for s in spans if s.length > 0)


def stock_retention(h: Tensor, dim: int, prompt: int, history: int, order: Order) -> Tensor:
    """The stock (vendor) retention: ``torch.cat`` of the retained slices, a new tensor.

    Returns ``h`` itself when ``extent(h) <= prompt + history``, as the vendor keeps its cache
    object untouched then. The vendor's token2wav trims with ``cat([H[:P], H[-100:]])`` on both
    caches: that is ``OLDEST_FIRST`` with ``prompt=P, history=100``, and ``NEWEST_FIRST`` with
    ``prompt=100, history=P``.
    """
    order = Order(order)
    extent = h.shape[dim]
    if extent <= prompt + history:
        return h
    parts = [h.narrow(dim, s.src, s.length) for s in retained_spans(extent, prompt, history, order)]
    return torch.cat(parts or [h.narrow(dim, 0, 0)], dim=dim)


class _Copy(NamedTuple):
    """Write ``length`` frames from ``source`` at ``src`` into the buffer at ``dst``."""

    dst: int
    source: Source
    src: int
    length: int


@functools.lru_cache(maxsize=4096)
def _plan(retention: RetentionRule, layout: tuple[tuple[Source, int], ...]) -> tuple[_Copy, ...]:
    """The copies that retain ``H`` = concatenation of ``layout`` runs into the buffer in place.

    ``layout`` lists ``(source, length)`` runs of ``H`` in order; a ``"live"`` run is the
    buffer's live data from offset 0. Moves within the buffer come first, ordered so that none
    overwrites frames another still has to read; writes from outside sources come last.
    """
    runs, start = [], 0
    for source, length in layout:
        runs.append((source, start, length))
        start += length
    copies: list[_Copy] = []
    for span in retention.spans(start):
        for source, run_start, run_len in runs:
            lo, hi = max(span.src, run_start), min(span.src + span.length, run_start + run_len)
            if lo < hi:
                copies.append(_Copy(span.at + lo - span.src, source, lo - run_start, hi - lo))
    moves = [c for c in copies if c.source == "live" and c.dst != c.src]
    writes = [c for c in copies if c.source != "live"]
    return (*_clobber_free(moves), *writes)


def _clobber_free(moves: list[_Copy]) -> list[_Copy]:
    """Order in-buffer moves so that no move writes where a later move still reads."""
    pending, ordered = list(moves), []
    while pending:
        for i, move in enumerate(pending):
            if not any(
                _overlap(move.dst, o.src, move.length, o.length) for o in pending if o != move
            ):
                ordered.append(pending.pop(i))
                break
        else:
            raise RuntimeError(f"carry: no clobber-free order for moves {pending}: report this bug")
    return ordered


def _overlap(a: int, b: int, a_len: int, b_len: int) -> bool:
    return a < b + b_len and b < a + a_len


@dataclass(eq=False)
class CarryValue:
    """A carry's contents by value: its whole buffer, live extent and reserved slots.

    What a session owns of a region when it runs on a binding it shares with other sessions
    (``adapters.token2wav.shared``): the binding's working :class:`Carry` keeps the address the
    graphs alias; each session's value is copied in before its period (:meth:`Carry.load`) and
    out after (:meth:`Carry.save`). The buffer is the only allocation (the carry's size)."""

    buffer: Tensor
    extent: int
    reserved: int = 0

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()


class Carry:
    """A region's retained cache in one preallocated buffer whose address never changes.

    Args:
        base: the prompt-only state (shared by every carry of the stream, never written here).
            The buffer takes its dtype and device; its extent along ``dim`` is the base extent.
        dim: the clock dimension (negative counts from the end).
        prompt, history, order: the region's declared retention (module docstring).
        capacity: the buffer's length along ``dim``: the region's bound A from the plan, at least
            ``max(base extent, prompt + history)``; room beyond ``prompt + history`` lets an
            ``OLDEST_FIRST`` operator :meth:`reserve` slots for the frames a call appends.

    Counters: ``retentions`` (calls of :meth:`retain`, :meth:`append`, :meth:`commit`),
    ``evictions`` (those where retention fired), ``resets``.
    """

    def __init__(
        self, base: Tensor, *, dim: int, prompt: int, history: int, order: Order, capacity: int
    ) -> None:
        if not -base.dim() <= dim < base.dim():
            raise ValueError(f"carry: dim {dim} is out of range for a {base.dim()}-d base state")
        dim %= base.dim()
        self.retention = RetentionRule(dim, prompt, history, order)
        need = max(base.shape[dim], self.retention.bound)
        if capacity < need:
            raise ValueError(
                f"carry: capacity {capacity} < {need} = max(base extent {base.shape[dim]}, "
                f"prompt + history {self.retention.bound}): size it from the plan's bound A"
            )
        self._base = base
        shape = list(base.shape)
        shape[dim] = capacity
        # The one allocation of the carry's lifetime.
        self._buffer = torch.empty(shape, dtype=base.dtype, device=base.device)
        self._extent = 0
        self._reserved = 0
        self.retentions = self.evictions = self.resets = 0
        self._write_base()

    # -- geometry ---------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        """The clock dimension (non-negative)."""
        return self.retention.dim

    @property
    def extent(self) -> int:
        """The live extent along :attr:`dim`."""
        return self._extent

    @property
    def capacity(self) -> int:
        """The buffer's length along :attr:`dim`: the most frames it can ever hold."""
        return self._buffer.shape[self.dim]

    @property
    def base(self) -> Tensor:
        """The shared prompt-only state :meth:`reset` restores (read-only by contract)."""
        return self._base

    @property
    def buffer(self) -> Tensor:
        """The whole buffer, live frames and spare capacity."""
        return self._buffer

    def data_ptr(self) -> int:
        """The buffer's address; constant for the carry's lifetime."""
        return self._buffer.data_ptr()

    def view(self) -> Tensor:
        """The live frames: a view of the buffer from offset 0 (its base pointer if non-empty)."""
        return self._buffer.narrow(self.dim, 0, self._extent)

    def window(self, n: int) -> Tensor:
        """The live frames followed by ``n`` reserved slots: what an operator attends over."""
        self._check_room(n)
        return self._buffer.narrow(self.dim, 0, self._extent + n)

    # -- writes -----------------------------------------------------------------------------

    def retain(self, h: Tensor) -> Tensor:
        """Write ``stock_retention(h)`` into the buffer in place; return :meth:`view`.

        ``h`` is the full post-call cache the operator produced (e.g. ``cat([k_new, cache])``),
        a fresh tensor: to retain frames already written in the buffer use :meth:`append` or
        :meth:`reserve` / :meth:`commit`.
        """
        self._check_frames(h, "h")
        if (
            h.numel()
            and h.untyped_storage().data_ptr() == self._buffer.untyped_storage().data_ptr()
        ):
            raise ValueError(
                "carry.retain: h shares the carry's storage; pass the fresh post-call cache, "
                "or use append(new) / reserve(n)+commit(n) to extend the carry in place"
            )
        extent = h.shape[self.dim]
        for s in self.retention.spans(extent):
            self._slot(s.at, s.length).copy_(h.narrow(self.dim, s.src, s.length))
        return self._finish(extent)

    def append(self, new: Tensor) -> Tensor:
        """``retain(cat-in-order(new, view()))`` without allocating; return :meth:`view`.

        ``OLDEST_FIRST`` appends ``new`` after the live frames, ``NEWEST_FIRST`` prepends it.
        """
        self._check_frames(new, "new")
        n, live = new.shape[self.dim], self._extent
        order = self.retention.order
        layout: tuple[tuple[Source, int], ...] = (
            (("live", live), ("new", n))
            if order is Order.OLDEST_FIRST
            else (("new", n), ("live", live))
        )
        self._run(_plan(self.retention, layout), new)
        return self._finish(live + n)

    def reserve(self, n: int) -> Tensor:
        """The ``n`` slots right after the live frames, for an ``OLDEST_FIRST`` operator to fill.

        Attend over :meth:`window` ``(n)``, then call :meth:`commit` ``(n)`` to apply retention.
        """
        if self.retention.order is not Order.OLDEST_FIRST:
            raise ValueError("carry.reserve: a newest_first carry prepends; use append(new)")
        self._check_room(n)
        self._reserved = n
        return self._buffer.narrow(self.dim, self._extent, n)

    def commit(self, n: int) -> Tensor:
        """Take the ``n`` reserved slots as live, apply retention in place; return :meth:`view`."""
        if n != self._reserved:
            raise ValueError(
                f"carry.commit({n}) after reserve({self._reserved}): commit what you reserved"
            )
        return self.settle(self._extent + n)

    def settle(self, extent: int) -> Tensor:
        """The buffer's first ``extent`` frames now hold the full post-call cache H, written there
        by the operator itself; apply retention in place and return :meth:`view`.

        This is the write-through form for either order: a ``NEWEST_FIRST`` attention that writes
        ``cat([k_new, k_cache])`` back into its own slot (after reading the old cache) leaves H at
        the front of the buffer. Only the retention's moves run here, so the operator's work may
        live in a replayed graph while this bookkeeping stays outside it.
        """
        self._check_room(extent - self._extent)
        self._reserved = 0
        self._run(_plan(self.retention, (("live", extent),)), None)
        return self._finish(extent)

    def reset(self) -> Tensor:
        """Turn reset: write the prompt-only base state in place; return :meth:`view`."""
        self._write_base()
        self.resets += 1
        return self.view()

    # -- by value (a session's own carry on a shared binding) -------------------------------

    def initial_value(self) -> CarryValue:
        """A new value at the reset state (the base written at offset 0): a buffer of this
        carry's shape, the one allocation of a session that shares this carry's binding."""
        buffer = torch.empty_like(self._buffer)
        extent = self._base.shape[self.dim]
        buffer.narrow(self.dim, 0, extent).copy_(self._base)
        return CarryValue(buffer, extent)

    def load(self, value: CarryValue) -> None:
        """Take ``value`` over in place (the whole buffer: one device copy); the address stays."""
        if value.buffer.shape != self._buffer.shape:
            raise ValueError(
                f"carry.load: a value of {tuple(value.buffer.shape)} into a carry of "
                f"{tuple(self._buffer.shape)}: load values made by this carry's initial_value"
            )
        self._buffer.copy_(value.buffer)
        self._extent, self._reserved = value.extent, value.reserved

    def save(self, into: CarryValue) -> None:
        """Write this carry's contents into ``into`` in place (one device copy)."""
        into.buffer.copy_(self._buffer)
        into.extent, into.reserved = self._extent, self._reserved

    # -- internals --------------------------------------------------------------------------

    def _slot(self, at: int, length: int) -> Tensor:
        return self._buffer.narrow(self.dim, at, length)

    def _write_base(self) -> None:
        extent = self._base.shape[self.dim]
        self._slot(0, extent).copy_(self._base)
        self._extent, self._reserved = extent, 0

    def _finish(self, extent: int) -> Tensor:
        """Record one retention of a cache of ``extent`` frames."""
        self.retentions += 1
        if extent > self.retention.bound:
            self.evictions += 1
        self._extent = sum(s.length for s in self.retention.spans(extent))
        return self.view()

    def _run(self, plan: tuple[_Copy, ...], new: Tensor | None) -> None:
        for c in plan:
            if c.source == "live":
                self._move(c.dst, c.src, c.length)
            else:
                assert new is not None, (
                    "carry: a plan wrote new frames without any: report this bug"
                )
                self._slot(c.dst, c.length).copy_(new.narrow(self.dim, c.src, c.length))

    def _move(self, dst: int, src: int, length: int) -> None:
        """Move frames within the buffer; chunks never overlap (``copy_`` rejects overlap)."""
        step = abs(dst - src)
        # Leftward moves go front to back, rightward back to front, so no chunk reads a frame
        # an earlier chunk of the same move has already overwritten.
        starts = range(0, length, step) if dst < src else reversed(range(0, length, step))
        for off in starts:
            k = min(step, length - off)
            self._slot(dst + off, k).copy_(self._slot(src + off, k))

    def _check_room(self, n: int) -> None:
        if n < 0 or self._extent + n > self.capacity:
            raise ValueError(
                f"carry: {n} more frames after {self._extent} exceed capacity {self.capacity}: "
                "size the carry from the plan's bound A (it includes the frames a call appends)"
            )

    def _check_frames(self, t: Tensor, name: str) -> None:
        buf = self._buffer
        other = [s for i, s in enumerate(t.shape) if i != self.dim]
        want = [s for i, s in enumerate(buf.shape) if i != self.dim]
        if t.dim() != buf.dim() or other != want or t.dtype != buf.dtype or t.device != buf.device:
            raise ValueError(
                f"carry: {name} is {tuple(t.shape)} {t.dtype} on {t.device}, the carry holds "
                f"{tuple(buf.shape)} {buf.dtype} on {buf.device} (clock dim {self.dim}): pass "
                "frames of the carry's region (only the clock dim may differ)"
            )

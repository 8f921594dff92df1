"""Declarations: a model family's clocks, regions, retention, constants, effects and operators.

A declaration is what an adapter states about its model family before any traffic (paper §2–3):
the native clocks and their fixed rate relations, the operating point (named integers), the
admission predicate, the persistent regions with their retention policy and the vendor's static
envelope, the device-resident constants, the declared effects and the operators with their call
extents. Everything the runtime later sizes, captures or refuses is derived from it
(:mod:`engine.plan`).

Declarations are YAML files read with ``yaml.safe_load`` by :mod:`engine.declaration_io`
(``load_declaration``) into the frozen dataclasses below. Extents and sizes are
:class:`engine.expr.Expr` over operating-point names, never ``eval``-ed.

Constraints every loaded declaration satisfies (the loader enforces them):

* every region has exactly one dim that follows a clock (its extent), and that clock is declared;
* every region is written by at most one operator, so its extent over a stream is well defined;
* host randomness is forbidden; device randomness is allowed only where an operator says so;
* every expression names only operating-point names (call-kind variables and ``f``/``frames`` in
  call extents and the admission predicate).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TypeVar

from engine.expr import Expr, ExprError, Predicate, bounded

T = TypeVar("T")


class Order(StrEnum):
    """Where a region's newest frames sit along its clock dimension.

    ``newest_first``: new frames are prepended (``cat([new, cache])``, the DiT estimator).
    ``oldest_first``: new frames are appended (``cat([cache, new])``, the conformer).
    """

    NEWEST_FIRST = "newest_first"
    OLDEST_FIRST = "oldest_first"


class RetentionPolicy(StrEnum):
    """How a region's extent is bounded along its clock (property C2).

    ``sliding_window``: keep the newest ``window`` frames.
    ``ring``: a preallocated ring of ``capacity`` frames, written in place; its attended extent
    is always the capacity (masked), so it never changes shape.
    ``prompt_plus_history``: keep ``prompt`` prompt frames and ``history`` history frames in the
    layout given by ``order`` (the runs :func:`engine.carry.retained_spans` keeps).
    """

    SLIDING_WINDOW = "sliding_window"
    RING = "ring"
    PROMPT_PLUS_HISTORY = "prompt_plus_history"


class DeclarationError(ValueError):
    """A declaration that cannot be loaded.

    The message names the YAML path of the field, the bad value and the fix.
    """


class DeclarationNotFound(DeclarationError, FileNotFoundError):
    """No declaration file at the given path or under the given shipped name."""


HOST_RANDOMNESS_FORBIDDEN = "forbidden"
CALL_PARAMETERS = ("f", "frames")  # per-call names the admission predicate and extents may read
STEADY_KIND = "steady"  # the default grid call kind (constant stride)
DTYPE_BYTES: Mapping[str, int] = MappingProxyType(
    {
        "float64": 8,
        "float32": 4,
        "float16": 2,
        "bfloat16": 2,
        "int64": 8,
        "int32": 4,
        "int16": 2,
        "int8": 1,
        "uint8": 1,
        "bool": 1,
    }
)


@dataclass(frozen=True)
class Clock:
    """A native clock: a root with a rate (``rate_hz``), a fixed multiple of another clock
    (``per`` + ``ratio``; ``per: call`` counts per operator call, e.g. solver steps), or an
    irregular event clock such as turns (``event``)."""

    name: str
    rate_hz: float | None = None
    per: str | None = None
    ratio: Expr | None = None
    event: bool = False


@dataclass(frozen=True)
class Dim:
    """One dimension of a region: a fixed ``size`` expression, or the ``clock`` it follows."""

    name: str
    size: Expr | None = None
    clock: str | None = None


@dataclass(frozen=True)
class Retention:
    """A region's retention policy and its parameters (unused ones are ``None``)."""

    policy: RetentionPolicy
    order: Order | None = None
    prompt: Expr | None = None
    history: Expr | None = None
    window: Expr | None = None
    capacity: Expr | None = None

    def bound(self, env: Mapping[str, int]) -> int:
        """The retained bound: the largest extent the region keeps between calls."""
        if self.policy is RetentionPolicy.PROMPT_PLUS_HISTORY:
            assert self.prompt is not None and self.history is not None, "validated at load"
            return self.prompt.evaluate(env) + self.history.evaluate(env)
        limit = self.window if self.policy is RetentionPolicy.SLIDING_WINDOW else self.capacity
        assert limit is not None, "validated at load"
        return limit.evaluate(env)

    def retained_extent(self, extent: int, env: Mapping[str, int]) -> int:
        """The extent after retention is applied to a live cache of ``extent`` frames."""
        if self.policy is RetentionPolicy.RING:
            return self.bound(env)
        return min(extent, self.bound(env))


@dataclass(frozen=True)
class Envelope:
    """The vendor's static allocation for a region (the stock ``Â``), as a literal shape."""

    shape: tuple[int, ...]
    dtype: str
    source: str = ""


@dataclass(frozen=True)
class Region:
    """A persistent state region: its dims (one follows a clock), retention, reset extent
    (the extent right after a turn reset), address stability, dtype and stock envelope."""

    name: str
    dims: tuple[Dim, ...]
    retention: Retention
    reset: Expr
    address_stable: bool
    dtype: str
    envelope: Envelope | None = None
    note: str = ""

    @property
    def clock_axis(self) -> int:
        """Index of the dim that follows a clock (exactly one, validated at load)."""
        return next(i for i, dim in enumerate(self.dims) if dim.clock is not None)

    @property
    def clock(self) -> str:
        """The clock this region's extent follows."""
        clock = self.dims[self.clock_axis].clock
        assert clock is not None, "validated at load"
        return clock

    def shape(self, extent: int, env: Mapping[str, int]) -> tuple[int, ...]:
        """The demand-sized shape at ``extent`` frames along the clock dim."""
        return tuple(extent if dim.clock is not None else _size(dim, env) for dim in self.dims)


def _size(dim: Dim, env: Mapping[str, int]) -> int:
    assert dim.size is not None, "validated at load"
    return dim.size.evaluate(env)


@dataclass(frozen=True)
class Constant:
    """A device-resident constant the vendor rebuilds or keeps on the host (shape, dtype)."""

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    note: str = ""


@dataclass(frozen=True)
class CallExtent:
    """What one operator does on one call kind: ``frames`` it processes (the query length) and
    ``advance``, how far every region it writes grows before retention (the stride ``s``)."""

    frames: Expr
    advance: Expr


@dataclass(frozen=True)
class DeclaredCall:
    """A kind of call in a stream (steady, flush, last, ...) and its variables: each is a fixed
    expression or an inclusive ``(low, high)`` range of expressions (flushes of 8–28 tokens,
    written ``[8, f_call // 2]`` so that no call exceeds the operating point's ``f_call``)."""

    name: str
    fixed: Mapping[str, Expr] = field(default_factory=dict)
    ranges: Mapping[str, tuple[Expr, Expr]] = field(default_factory=dict)

    def bounds(self, var: str, env: Mapping[str, int]) -> tuple[int, int]:
        """The inclusive integer range of ranged variable ``var`` at operating point ``env``."""
        low, high = self.ranges[var]
        return low.evaluate(env), high.evaluate(env)

    def settle(self, values: Mapping[str, int], env: Mapping[str, int]) -> dict[str, int]:
        """The call's parameters: ``env``, the fixed variables and the given ranged ``values``.

        Raises ``DeclarationError`` when a ranged variable is missing or out of its range.
        """
        settled = dict(env)
        settled.update({var: expr.evaluate(env) for var, expr in self.fixed.items()})
        for var in self.ranges:
            low, high = self.bounds(var, env)
            if var not in values or not low <= values[var] <= high:
                raise DeclarationError(
                    f"calls.{self.name}.{var}: got {values.get(var)!r}; expected an integer "
                    f"in [{low}, {high}]"
                )
            settled[var] = values[var]
        return settled


@dataclass(frozen=True)
class Operator:
    """An operator: regions read and written, its call extents per call kind, the kind whose
    constant stride spans its catalog grid, its catalog limit and whether it may draw device
    randomness (host randomness is never admitted). ``kernels`` pins kernel choices that
    change its bits (``sdpa``: the attention backend, one of :data:`SDPA_KERNELS`)."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    calls: Mapping[str, CallExtent]
    grid: str = STEADY_KIND
    device_randomness: bool = False
    catalog_limit: int = 64
    note: str = ""
    kernels: Mapping[str, str] = field(default_factory=dict)


#: Attention backends an operator may pin (``default``: torch's own choice per call).
SDPA_KERNELS = ("default", "math", "efficient", "flash", "cudnn")


@dataclass(frozen=True)
class StreamEvent:
    """One event of a declared call pattern: a turn ``reset`` (kind ``None``) or ``repeat``
    calls of ``kind`` with the given variable values."""

    kind: str | None
    values: Mapping[str, int] = field(default_factory=dict)
    repeat: int = 1


@dataclass(frozen=True)
class Declaration:
    """A validated declaration. Use :meth:`values` for the operating point as integers."""

    name: str
    family: str
    clocks: Mapping[str, Clock]
    operating_point: Mapping[str, Expr]
    admission: Predicate
    regions: Mapping[str, Region]
    constants: Mapping[str, Constant]
    calls: Mapping[str, DeclaredCall]
    operators: Mapping[str, Operator]
    stream: tuple[StreamEvent, ...]
    host_randomness: str = HOST_RANDOMNESS_FORBIDDEN
    description: str = ""
    # The plans :func:`engine.plan.make_plan` made of this declaration, by their overrides: a
    # plan is a pure function of both, and a run asks for the same one several times.
    _plans: dict[tuple[tuple[str, int], ...], object] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def values(self, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
        """The operating point as integers, with ``overrides`` replacing declared entries.

        Entries may be expressions over other entries; an override replaces the expression, so
        ``f_call=50`` also changes every entry derived from ``f_call``.
        """
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.operating_point))
        if unknown:
            known = ", ".join(self.operating_point)
            raise DeclarationError(
                f"operating_point.{unknown[0]}: cannot override an undeclared name; "
                f"expected one of {known}"
            )
        return resolve_operating_point(self.operating_point, overrides)

    def clock_rate(self, name: str, values: Mapping[str, int] | None = None) -> float:
        """Ticks per second of clock ``name``: its root's ``rate_hz`` times every ratio down to it
        (the Token2Wav ``sample`` clock: 25 tokens/s · 2 frames · 480 samples = 24,000 Hz)."""
        clock = self.clocks.get(name)
        if clock is None:
            raise DeclarationError(
                f"{self.name}: clocks.{name} is not declared; "
                f"expected one of {', '.join(self.clocks)}"
            )
        if clock.rate_hz is not None:
            return clock.rate_hz
        if clock.per is None or clock.per == "call" or clock.ratio is None:
            raise DeclarationError(
                f"{self.name}: clocks.{name} has no fixed rate (an event or per-call clock); "
                "declare rate_hz or per + ratio on a clock with a rate"
            )
        env = self.values() if values is None else values
        return self.clock_rate(clock.per, env) * clock.ratio.evaluate(env)


def resolve_operating_point(
    entries: Mapping[str, Expr], overrides: Mapping[str, int]
) -> dict[str, int]:
    """Evaluate operating-point entries in dependency order; cycles and unknown names raise."""
    for name, value in overrides.items():
        try:
            bounded(value, f"{name}={value}")
        except ExprError as error:
            raise DeclarationError(f"operating_point.{name}: {error}") from None
    resolved: dict[str, int] = dict(overrides)
    pending = {name: expr for name, expr in entries.items() if name not in resolved}
    while pending:
        ready = [name for name, expr in pending.items() if expr.names() <= resolved.keys()]
        if not ready:
            name, expr = next(iter(pending.items()))
            missing = sorted(expr.names() - resolved.keys())
            raise DeclarationError(
                f"operating_point.{name}: {expr.text!r} reads {', '.join(missing)}, which is "
                "undeclared or part of a cycle; declare it as an integer entry"
            )
        for name in ready:
            try:
                resolved[name] = pending.pop(name).evaluate(resolved)
            except ExprError as error:
                raise DeclarationError(f"operating_point.{name}: {error}") from None
    return {name: resolved[name] for name in entries}


def frozen(mapping: Mapping[str, T]) -> Mapping[str, T]:
    """A read-only view, so a frozen dataclass's mappings cannot be mutated either."""
    return MappingProxyType(dict(mapping))

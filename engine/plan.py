"""The plan: everything the declaration fixes before traffic, as pure functions (no torch).

From a :class:`engine.contract.Declaration` and an operating point this module derives (paper
§2.2–3.5):

* the extents ``a_r(t)`` of every region over a declared call pattern (walked by
  :mod:`engine.extents`): before, at the peak of and after each call, through turn resets,
  flushes and last chunks;
* the bound ``A_r``: the largest extent a region ever has, i.e. its retained bound plus the
  largest call it takes (``P + 100 + f_call`` frames for the Token2Wav caches);
* the finite catalog ``Σ_o`` per operator as plain data (call kind, frames, attended extent of
  every region it reads), closed under the operator's grid call from a turn reset, and the catalog
  width by criterion 3.5: ``K_r = ⌈W_r / s_r⌉ + 1`` with ``W_r = A_r − A_r⁻`` the retained bound
  minus the extent at a turn reset and ``s_r`` the extent advance per grid call (the paper's
  ``W/s + 1`` whenever ``s`` divides ``W``), plus the flush classes admitted off the grid;
* the over-reservation ``ρ_r = bytes(Â_r) / bytes(A_r)`` of the vendor's static envelope;
* the memory price of eq. 6 for every arm (:func:`memory_price`).

An operator whose catalog is wider than its ``catalog_limit`` (64 unless declared) is outside
the lossless scope: it runs eagerly in every arm and adds no staging to the price.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.arms import ARMS, Arm
from engine.contract import (
    DTYPE_BYTES,
    Declaration,
    DeclarationError,
    Operator,
    Region,
    RetentionPolicy,
)
from engine.expr import ExprError, magnitude
from engine.extents import (
    PlannedCall,
    call_box,
    call_count,
    call_sizes,
    call_values,
    check_point,
    grid_closure,
    is_admitted,
    reset_state,
    walk,
)
from engine.sizes import MIB

MAX_BYTES = 1 << 60  # a region's bytes: far past any device, far short of 3.9e79 MiB


@dataclass(frozen=True)
class CatalogEntry:
    """One catalog entry as plain data; adapters turn it into replay signatures
    (:class:`engine.signature.Signature`) of tensors."""

    operator: str
    kind: str
    frames: int
    extents: tuple[tuple[str, int], ...]  # (region read, attended extent before the call)


@dataclass(frozen=True)
class RegionPlan:
    """Per region: clock, retention, extents and bounds, catalog width and over-reservation."""

    name: str
    clock: str
    policy: str
    reset: int
    retained_bound: int
    bound: int
    stride: int
    extents: tuple[int, ...]
    width: int
    demand_shape: tuple[int, ...]
    demand_bytes: int
    envelope_shape: tuple[int, ...] | None
    envelope_bytes: int
    rho: float
    address_stable: bool


@dataclass(frozen=True)
class OperatorPlan:
    """Per operator: its catalog, width, flush classes and whether replay may cover it."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    grid: str
    grid_catalog: tuple[CatalogEntry, ...]
    catalog: tuple[CatalogEntry, ...]
    width: int
    flush_sizes: tuple[int, ...]  # empty when counted
    flush_classes: int
    flush_counted: bool  # past the limit: ``flush_classes`` counts calls, an upper bound
    limit: int
    in_scope: bool
    device_randomness: bool


@dataclass(frozen=True)
class ArmPrice:
    """Eq. 6 for one arm: state bytes plus replay staging bytes."""

    arm: str
    state_bytes: int
    staging_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.state_bytes + self.staging_bytes


@dataclass(frozen=True)
class Plan:
    """The whole plan of one declaration at one operating point."""

    declaration: str
    family: str
    values: Mapping[str, int]
    regions: tuple[RegionPlan, ...]
    operators: tuple[OperatorPlan, ...]
    prices: tuple[ArmPrice, ...]
    walk: tuple[PlannedCall, ...] = field(default=())

    def over_envelope(self) -> tuple[RegionPlan, ...]:
        """Regions whose demand exceeds their stock envelope in some dim: the stock path cannot
        hold them at this operating point (e.g. a voice prompt longer than the cache)."""
        return tuple(
            r
            for r in self.regions
            if r.envelope_shape is not None
            and any(d > e for d, e in zip(r.demand_shape, r.envelope_shape, strict=True))
        )

    def region(self, name: str) -> RegionPlan:
        """The region plan named ``name``."""
        return next(r for r in self.regions if r.name == name)

    def operator(self, name: str) -> OperatorPlan:
        """The operator plan named ``name``."""
        return next(o for o in self.operators if o.name == name)

    def price(self, arm: Arm | str) -> ArmPrice:
        """The memory price of ``arm``."""
        return next(p for p in self.prices if p.arm == str(arm))


# --- bounds, catalogs, widths ---------------------------------------------------------------


def _writer(decl: Declaration, region: str) -> Operator | None:
    return next((op for op in decl.operators.values() if region in op.writes), None)


def _largest_frames(decl: Declaration, env: Mapping[str, int], op: Operator) -> int:
    """The most frames ``op`` takes in any call it declares, admitted or not (eager runs it).

    A kind with more assignments than the operator's catalog limit is bounded by interval
    arithmetic over its ranges (exact for the declared forms) instead of being enumerated.
    """
    sizes = []
    for kind in op.calls:
        if call_count(decl, env, kind) <= op.catalog_limit:
            sizes += [
                call_sizes(op, kind, decl.calls[kind].settle(values, env))[0]
                for values in call_values(decl, env, kind)
            ]
        else:
            try:
                sizes.append(op.calls[kind].frames.interval(call_box(decl, env, kind))[1])
            except ExprError as error:
                raise DeclarationError(f"operators.{op.name}.calls.{kind}: {error}") from None
    return max(sizes, default=0)


def region_plan(decl: Declaration, env: Mapping[str, int], region: Region) -> RegionPlan:
    """Bounds, grid extents, width (criterion 3.5) and over-reservation of one region."""
    retention, writer = region.retention, _writer(decl, region.name)
    retained = retention.bound(env)
    reset = reset_state(decl, env)[region.name]
    stride, bound = 0, reset
    extents: tuple[int, ...] = (reset,)
    if writer is not None:
        stride = call_sizes(writer, writer.grid, decl.calls[writer.grid].settle({}, env))[1]
        grid = [c for c in grid_closure(decl, env, writer.grid) if c.operator == writer.name]
        extents = tuple(sorted({c.before[region.name] for c in grid}))
        grows = retention.policy is RetentionPolicy.PROMPT_PLUS_HISTORY
        bound = retained + _largest_frames(decl, env, writer) if grows else max(retained, reset)
    window = 0 if retention.policy is RetentionPolicy.RING else retained - reset
    demand = region.shape(bound, env)
    envelope = region.envelope
    demand_bytes = _bytes(demand, region.dtype)
    envelope_bytes = demand_bytes if envelope is None else _bytes(envelope.shape, envelope.dtype)
    return RegionPlan(
        name=region.name,
        clock=region.clock,
        policy=retention.policy.value,
        reset=reset,
        retained_bound=retained,
        bound=bound,
        stride=stride,
        extents=extents,
        width=catalog_width(window, stride),
        demand_shape=demand,
        demand_bytes=demand_bytes,
        envelope_shape=None if envelope is None else envelope.shape,
        envelope_bytes=envelope_bytes,
        rho=envelope_bytes / demand_bytes,
        address_stable=region.address_stable,
    )


def catalog_width(window: int, stride: int) -> int:
    """Criterion 3.5: ``K = ⌈W / s⌉ + 1`` distinct extents over a window ``W`` at stride ``s``.

    Equals the paper's ``W / s + 1`` when ``s`` divides ``W``; a region that does not move
    (``W = 0`` or ``s = 0``, e.g. a ring) has width 1.
    """
    if window <= 0 or stride <= 0:
        return 1
    return math.ceil(window / stride) + 1


def _bytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes of a region's shape, refused past :data:`MAX_BYTES` (each extent is bounded by the
    expressions' bound, their product is bounded here)."""
    size = math.prod(shape) * DTYPE_BYTES[dtype]
    if size > MAX_BYTES:
        raise ExprError(
            f"{dtype} region of shape {list(shape)} takes {magnitude(size)} bytes, over the "
            f"bound {MAX_BYTES:.3g} (1 EiB): check the operating point"
        )
    return size


def operator_plan(decl: Declaration, env: Mapping[str, int], op: Operator) -> OperatorPlan:
    """The catalog of ``op``: grid closure plus the admitted calls of the declared stream.

    The width is the number of distinct grid signatures (joint over the regions it reads), the
    count criterion 3.5 bounds; off-grid calls add at most the flush classes.
    """
    grid = [c for c in grid_closure(decl, env, op.grid) if c.operator == op.name]
    streamed = [c for c in walk(decl, env) if c.operator == op.name and c.admitted]
    grid_catalog = _entries(op, grid)
    width = len(grid_catalog)
    flush_sizes, flush_classes, flush_counted = _flushcall_sizes(decl, env, op)
    return OperatorPlan(
        name=op.name,
        reads=op.reads,
        writes=op.writes,
        grid=op.grid,
        grid_catalog=grid_catalog,
        catalog=_entries(op, [c for c in grid if c.admitted] + streamed),
        width=width,
        flush_sizes=flush_sizes,
        flush_classes=flush_classes,
        flush_counted=flush_counted,
        limit=op.catalog_limit,
        in_scope=width <= op.catalog_limit,
        device_randomness=op.device_randomness,
    )


def _entries(op: Operator, calls: Iterable[PlannedCall]) -> tuple[CatalogEntry, ...]:
    unique = {
        CatalogEntry(op.name, c.kind, c.frames, tuple((r, c.before[r]) for r in op.reads)): None
        for c in calls
    }
    return tuple(unique)


def _flushcall_sizes(
    decl: Declaration, env: Mapping[str, int], op: Operator
) -> tuple[tuple[int, ...], int, bool]:
    """Admitted call sizes off the grid (flushes, last chunks): the flush classes, ≤ ``s_r``
    when admission caps the advance at the stride.

    Returns ``(sizes, classes, counted)``. Past the catalog limit the assignments are counted,
    not enumerated: ``sizes`` is then empty, ``classes`` the count (an upper bound on the
    classes) and ``counted`` true.
    """
    off_grid = [kind for kind in op.calls if kind != op.grid]
    count = sum(call_count(decl, env, kind) for kind in off_grid)
    if count > op.catalog_limit:
        return (), count, True
    grid_frames = call_sizes(op, op.grid, decl.calls[op.grid].settle({}, env))[0]
    sizes = set()
    for kind in op.calls:
        for values in call_values(decl, env, kind):
            params = decl.calls[kind].settle(values, env)
            frames, advance = call_sizes(op, kind, params)
            if frames != grid_frames and is_admitted(decl, params, frames, advance):
                sizes.add(frames)
    return tuple(sorted(sizes)), len(sizes), False


# --- memory price (eq. 6) -------------------------------------------------------------------


def memory_price(
    decl: Declaration,
    regions: Mapping[str, RegionPlan],
    operators: Iterable[OperatorPlan],
    arm: Arm,
) -> ArmPrice:
    """Eq. 6 for one arm, from the declaration alone, over the lossless scope.

    Only regions that an in-scope operator reads or writes are priced: the arms transform the
    lossless scope alone, so everything outside it costs the same in every arm.

    * State: every region at the stock envelope ``Â`` without the state rule, at its bound ``A``
      with it. Written-through regions are this same memory, frozen into the graphs.
    * Staging (replay arms only, in-scope operators only): one static copy of every non-aliased
      region input per captured grid class. Without the state rule the caller materializes a new
      cache each call, so the stacked cache (at the envelope's other dims) is cloned per class;
      with it the address-stable regions are the carry, aliased, so they cost nothing.
    Step and chunk granularity stage the same bytes here: the step graphs of one class split the
    same stacked input; they differ in launches, not in this price.
    """
    scoped = {name for op in operators if op.in_scope for name in (*op.reads, *op.writes)}
    state = sum(
        r.demand_bytes if arm.state_rule else r.envelope_bytes
        for r in regions.values()
        if r.name in scoped
    )
    staging = 0
    if arm.replay:
        for op in operators:
            if op.in_scope:
                staging += _staging(decl, regions, op, arm.state_rule)
    return ArmPrice(arm=arm.value, state_bytes=state, staging_bytes=staging)


def _staging(
    decl: Declaration, regions: Mapping[str, RegionPlan], op: OperatorPlan, state_rule: bool
) -> int:
    total = 0
    for signature in op.grid_catalog:
        for name, extent in signature.extents:
            region = decl.regions[name]
            if state_rule and region.address_stable:
                continue  # the carry: aliased at its invariant address, no staging copy
            total += _input_bytes(region, regions[name], extent, state_rule)
    return total


def _input_bytes(region: Region, plan: RegionPlan, extent: int, state_rule: bool) -> int:
    """Bytes of the region as the caller passes it at ``extent`` frames."""
    shape = list(plan.demand_shape)
    if not state_rule and plan.envelope_shape is not None:
        shape = list(plan.envelope_shape)  # the stock view keeps the envelope's other dims
    shape[region.clock_axis] = extent
    dtype = region.dtype if state_rule or region.envelope is None else region.envelope.dtype
    return _bytes(shape, dtype)


# --- the whole plan -------------------------------------------------------------------------


PLANS_KEPT = 16  # plans kept with one declaration (one per voice length seen, say)


def make_plan(decl: Declaration, overrides: Mapping[str, int] | None = None) -> Plan:
    """The plan of ``decl`` at its operating point with ``overrides`` applied; a value past
    the expressions' bound anywhere in it (a size, an extent, a byte count) is a
    ``DeclarationError`` naming what computed it.

    Made once per declaration and operating point, then kept with the declaration (up to
    :data:`PLANS_KEPT`): a family's checks, footprint, host-memory check and binding ask for
    the same plan several times a run, and :func:`engine.declaration_io.load_declaration`
    returns one declaration per file text. A plan is read-only; share it, never change it."""
    try:
        env = decl.values(overrides)
        key = tuple(sorted(env.items()))  # the operating point: overrides that agree share it
        kept = decl._plans.get(key)
        if isinstance(kept, Plan):
            return kept
        plan = _plan(decl, env)
    except ExprError as error:
        raise DeclarationError(f"{decl.name}: {error}") from None
    if len(decl._plans) >= PLANS_KEPT:
        decl._plans.clear()  # atomic, where evicting one while another thread adds is not
    decl._plans[key] = plan
    return plan


def _plan(decl: Declaration, env: dict[str, int]) -> Plan:
    check_point(decl, env)
    regions = {name: region_plan(decl, env, region) for name, region in decl.regions.items()}
    operators = tuple(operator_plan(decl, env, op) for op in decl.operators.values())
    prices = tuple(memory_price(decl, regions, operators, arm) for arm in ARMS)
    return Plan(
        declaration=decl.name,
        family=decl.family,
        values=env,
        regions=tuple(regions.values()),
        operators=operators,
        prices=prices,
        walk=tuple(walk(decl, env)),
    )


def plan_as_dict(plan: Plan, *, with_walk: bool = False) -> dict[str, Any]:
    """The plan as JSON-ready data (prices gain ``total_bytes`` and ``total_mib``)."""
    data = asdict(plan)
    data["values"] = dict(plan.values)
    for price, row in zip(plan.prices, data["prices"], strict=True):
        row["total_bytes"] = price.total_bytes
        row["total_mib"] = round(price.total_bytes / MIB, 3)
    if not with_walk:
        del data["walk"]
    return data

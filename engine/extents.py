"""Extents of every region over a stream of calls: turn resets, steady calls, flushes, last chunks.

Pure functions of a :class:`engine.contract.Declaration` and an operating point (no torch). The
plan (:mod:`engine.plan`) builds bounds and catalogs on them; tests and adapters can walk any
call pattern to see the extent of every region before, at the peak of and after each call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.contract import (
    Declaration,
    DeclarationError,
    Operator,
    Region,
    RetentionPolicy,
    StreamEvent,
)
from engine.expr import ExprError, evaluate_predicate

State = dict[str, int]  # region name -> extent along its clock dim
MAX_CLOSURE_CALLS = 10_000  # a grid closure longer than this means retention never binds (the
# longest shipped one is 2,000 calls: the backbone window at one token per call)


@dataclass(frozen=True)
class PlannedCall:
    """One operator call in a walk: its kind, sizes, admission and the extents it met."""

    operator: str
    kind: str
    values: Mapping[str, int]
    frames: int
    advance: int
    admitted: bool
    before: Mapping[str, int]
    peak: Mapping[str, int]
    after: Mapping[str, int]


def check_point(decl: Declaration, env: Mapping[str, int]) -> None:
    """Refuse an operating point whose sizes are not sizes, before any walk or price.

    Every operating-point value, region reset and retention bound must be ≥ 0, every fixed dim
    > 0, and every call's frames and advance ≥ 0 over its whole range (the grid call's frames
    > 0). A ``DeclarationError`` names the entry, its value and the bound.
    """
    for name, value in env.items():
        _at_least(value, 0, f"operating_point.{name}")
    for region in decl.regions.values():
        path = f"regions.{region.name}"
        for dim in region.dims:
            if dim.size is not None:
                _at_least(dim.size.evaluate(env), 1, f"{path}.dims.{dim.name}")
        _at_least(region.reset.evaluate(env), 0, f"{path}.reset")
        _at_least(region.retention.bound(env), 0, f"{path}.retention")
    for op in decl.operators.values():
        for kind, extent in op.calls.items():
            path = f"operators.{op.name}.calls.{kind}"
            box = call_box(decl, env, kind)
            try:
                frames, advance = extent.frames.interval(box), extent.advance.interval(box)
            except ExprError as error:
                raise DeclarationError(f"{path}: {error}") from None
            _at_least(frames[0], 1 if kind == op.grid else 0, f"{path}.frames")
            _at_least(advance[0], 0, f"{path}.advance")


def _at_least(value: int, low: int, path: str) -> None:
    if value < low:
        raise DeclarationError(
            f"{path}: got {value}; a size must be {'positive' if low else 'non-negative'} "
            f"(>= {low}): fix the declaration or the --set value"
        )


def reset_state(decl: Declaration, env: Mapping[str, int]) -> State:
    """Every region's extent right after a turn reset (a ring is always at its capacity)."""
    return {
        name: region.retention.retained_extent(region.reset.evaluate(env), env)
        for name, region in decl.regions.items()
    }


def apply_call(
    decl: Declaration,
    env: Mapping[str, int],
    state: State,
    kind: str,
    values: Mapping[str, int] | None = None,
) -> tuple[State, list[PlannedCall]]:
    """Run one call of ``kind`` through every operator that declares it; return the new state.

    A ``prompt_plus_history`` region peaks at ``before + frames``: the stock path holds the whole
    live cache (retained frames ‖ the call's frames) until it trims after the call. A sliding
    window never holds more than its window (the concatenation is workspace) and a ring is
    written in place at its capacity. After the call every written region keeps
    ``retain(before + advance)``.
    """
    params = decl.calls[kind].settle(values or {}, env)
    new_state, calls = dict(state), []
    for op in decl.operators.values():
        if kind not in op.calls:
            continue
        frames, advance = call_sizes(op, kind, params)
        peak = {r: state[r] for r in op.reads}
        for name in op.writes:
            region = decl.regions[name]
            peak[name] = _peak(region, state[name], frames, env)
            new_state[name] = region.retention.retained_extent(state[name] + advance, env)
        admitted = is_admitted(decl, params, frames, advance)
        touched = (*op.reads, *(r for r in op.writes if r not in op.reads))
        calls.append(
            PlannedCall(
                operator=op.name,
                kind=kind,
                values=dict(values or {}),
                frames=frames,
                advance=advance,
                admitted=admitted,
                before={r: state[r] for r in touched},
                peak=peak,
                after={r: new_state[r] for r in touched},
            )
        )
    return new_state, calls


def _peak(region: Region, before: int, frames: int, env: Mapping[str, int]) -> int:
    if region.retention.policy is RetentionPolicy.PROMPT_PLUS_HISTORY:
        return before + frames
    return max(before, region.retention.retained_extent(before + frames, env))


def call_sizes(op: Operator, kind: str, params: Mapping[str, int]) -> tuple[int, int]:
    """``(frames, advance)`` of ``op`` on a call of ``kind`` with parameters ``params``."""
    extent = op.calls[kind]
    try:
        return extent.frames.evaluate(params), extent.advance.evaluate(params)
    except ExprError as error:
        raise DeclarationError(f"operators.{op.name}.calls.{kind}: {error}") from None


def is_admitted(decl: Declaration, params: Mapping[str, int], frames: int, advance: int) -> bool:
    """The admission predicate on the call's parameters; ``f`` is the frames it advances."""
    return evaluate_predicate(decl.admission, {**params, "f": advance, "frames": frames})


def walk(
    decl: Declaration, env: Mapping[str, int], events: Iterable[StreamEvent] | None = None
) -> list[PlannedCall]:
    """Walk a call pattern (the declaration's ``stream`` by default) from a turn reset.

    Returns one :class:`PlannedCall` per operator call, with the extents before, at peak and after.
    """
    state, calls = reset_state(decl, env), []
    for event in decl.stream if events is None else events:
        if event.kind is None:
            state = reset_state(decl, env)
            continue
        for _ in range(event.repeat):
            state, made = apply_call(decl, env, state, event.kind, event.values)
            calls.extend(made)
    return calls


def grid_closure(decl: Declaration, env: Mapping[str, int], kind: str) -> list[PlannedCall]:
    """Grid calls of ``kind`` from a turn reset until the state repeats (retention binds)."""
    state, calls = reset_state(decl, env), []
    seen: set[tuple[tuple[str, int], ...]] = set()
    while (key := tuple(sorted(state.items()))) not in seen:
        if len(seen) >= MAX_CLOSURE_CALLS:
            raise DeclarationError(
                f"calls.{kind}: extents still grow after {MAX_CLOSURE_CALLS} calls; declare a "
                "retention bound that the stride reaches (property C2)"
            )
        seen.add(key)
        state, made = apply_call(decl, env, state, kind)
        calls.extend(made)
    return calls


def call_count(decl: Declaration, env: Mapping[str, int], kind: str) -> int:
    """How many assignments :func:`call_values` would give: counted, never enumerated."""
    count = 1
    for var in decl.calls[kind].ranges:
        low, high = decl.calls[kind].bounds(var, env)
        count *= max(0, high - low + 1)
    return count


def call_box(decl: Declaration, env: Mapping[str, int], kind: str) -> dict[str, tuple[int, int]]:
    """A kind's parameters as intervals: the point ``env`` and fixed values, the ranged bounds."""
    params = {name: (value, value) for name, value in env.items()}
    call = decl.calls[kind]
    params.update({var: (v, v) for var, v in ((k, e.evaluate(env)) for k, e in call.fixed.items())})
    params.update({var: call.bounds(var, env) for var in call.ranges})
    return params


def call_values(decl: Declaration, env: Mapping[str, int], kind: str) -> list[dict[str, int]]:
    """Every assignment of a kind's ranged variables (the product of their ranges).

    Callers check :func:`call_count` first: a declaration may range over 10^9 values.
    """
    assignments: list[dict[str, int]] = [{}]
    for var in decl.calls[kind].ranges:
        low, high = decl.calls[kind].bounds(var, env)
        assignments = [{**a, var: v} for a in assignments for v in range(low, high + 1)]
    return assignments

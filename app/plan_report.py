"""Render an :class:`engine.plan.Plan` as readable tables, in the spirit of the paper's Table 3."""

from __future__ import annotations

from collections.abc import Sequence

from engine.plan import OperatorPlan, Plan, RegionPlan
from engine.sizes import MIB

EXTENTS_SHOWN = 6  # longer catalogs print as "first, second, …, last (count)"


def render_plan(plan: Plan) -> str:
    """The plan as text: operating point, regions, operators and the memory price per arm."""
    point = "  ".join(f"{name}={value}" for name, value in plan.values.items())
    sections = [
        f"plan: {plan.declaration} — {plan.family}",
        f"operating point: {point}",
        "",
        "regions (extents along each region's clock; A = bound, K = catalog width, criterion 3.5)",
        _table(_REGION_HEADER, [_region_row(r) for r in plan.regions]),
        "",
        "operators (K = grid signatures; above the limit an operator stays eager: outside scope)",
        _table(_OPERATOR_HEADER, [_operator_row(o) for o in plan.operators]),
        "",
        "memory price per arm (eq. 6, MiB, regions of the lossless scope)",
        _table(
            ("arm", "state", "staging", "total"),
            [
                (p.arm, _mib(p.state_bytes), _mib(p.staging_bytes), _mib(p.total_bytes))
                for p in plan.prices
            ],
        ),
    ]
    return "\n".join(sections) + "\n"


_REGION_HEADER = (
    "region",
    "clock",
    "retention",
    "reset",
    "retained",
    "A",
    "s",
    "catalog extents",
    "K",
    "stock envelope Â",
    "demand A",
    "ρ",
)
_OPERATOR_HEADER = ("operator", "reads", "grid", "K", "limit", "flush classes", "scope")


def _region_row(region: RegionPlan) -> tuple[str, ...]:
    envelope = "—" if region.envelope_shape is None else _shape(region.envelope_shape)
    return (
        region.name,
        region.clock,
        region.policy,
        str(region.reset),
        str(region.retained_bound),
        str(region.bound),
        str(region.stride),
        _extents(region.extents),
        f"{region.width:,}",
        envelope,
        _shape(region.demand_shape),
        f"{region.rho:.2f}",
    )


def _operator_row(op: OperatorPlan) -> tuple[str, ...]:
    scope = "lossless" if op.in_scope else f"OUTSIDE (K {op.width:,} > {op.limit})"
    if op.device_randomness:
        scope += ", device RNG"
    return (
        op.name,
        ", ".join(op.reads),
        op.grid,
        f"{op.width:,}",
        str(op.limit),
        f"≤{op.flush_classes:,} (counted)" if op.flush_counted else str(op.flush_classes),
        scope,
    )


def _extents(extents: Sequence[int]) -> str:
    if len(extents) <= EXTENTS_SHOWN:
        return ", ".join(str(e) for e in extents)
    return f"{extents[0]}, {extents[1]}, …, {extents[-1]} ({len(extents):,})"


def _shape(shape: Sequence[int]) -> str:
    return "×".join(str(size) for size in shape)


def _mib(count: int) -> str:
    return f"{count / MIB:,.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)

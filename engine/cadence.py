"""Cadence summaries and replay-counter arithmetic over native periods (no torch needed).

``replay_delta`` turns two snapshots of the replay engine into what happened in between;
``replay_totals`` flattens a delta for CSV columns and counter tracks; ``CadenceStats`` keeps
the sliding-window percentiles the live panel draws. All inputs and outputs are plain values.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

__all__ = ["REPLAY_COUNTERS", "CadenceStats", "replay_delta", "replay_totals"]


class _HasToDict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


REPLAY_COUNTERS = (
    "hits",
    "misses",
    "captures",
    "invalidations",
    "rejections",
    "fallbacks",
    "capture_s",
    "capture_bytes",
)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def replay_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``after - before`` for every number in the replay engine's snapshot, recursively.

    Accepts any nesting (per operator and total; ``misses`` by reason) and tolerates keys
    missing from ``before`` (taken as 0). Non-numeric leaves are dropped. A counter that went
    down was reset in between (``reset_counters``): its delta is its new value.
    """
    delta: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, Mapping):
            delta[key] = replay_delta(old if isinstance(old, Mapping) else {}, value)
        elif _is_number(value):
            base = old if _is_number(old) else 0
            delta[key] = value - base if value >= base else value
    return delta


def _has_counters(data: Any) -> bool:
    return isinstance(data, Mapping) and any(k in data for k in REPLAY_COUNTERS)


def _operator_entries(delta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Per-operator counter mappings, at the top level or one level down (``{"ops": {...}}``)."""
    found = [v for v in delta.values() if _has_counters(v)]
    if found:
        return found
    return [
        w for v in delta.values() if isinstance(v, Mapping) for w in v.values() if _has_counters(w)
    ]


def replay_totals(delta: Mapping[str, Any]) -> dict[str, float]:
    """Flat totals of a replay delta: ``hits``, ``misses``, ``misses.<reason>``, ``captures``...

    The total is taken from a ``"total"`` entry, else from counters at the top level, else
    summed over the per-operator entries; missing counters read as 0.
    """
    total = delta.get("total")
    if isinstance(total, Mapping):
        sources: list[Mapping[str, Any]] = [total]
    elif _has_counters(delta):
        sources = [delta]
    else:
        sources = _operator_entries(delta)
    flat: dict[str, float] = dict.fromkeys(REPLAY_COUNTERS, 0)
    for source in sources:
        for key in REPLAY_COUNTERS:
            value = source.get(key, 0)
            if isinstance(value, Mapping):
                for reason, n in value.items():
                    if _is_number(n):
                        flat[key] += n
                        flat[f"{key}.{reason}"] = flat.get(f"{key}.{reason}", 0) + n
            elif _is_number(value):
                flat[key] += value
    return flat


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-quantile (``0 <= q <= 1``) of ``values``: linear interpolation between the
    closest ranks (numpy's default). Every p50/p95/p99 the project prints comes from here (the
    live panel, ``converse``, the benchmarks), so one run gives one p95 everywhere.

    Raises ``ValueError`` for no values.
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values: summarize at least one period")
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class CadenceStats:
    """Sliding-window cadence summary for the live panel: percentiles and overruns.

    ``update`` costs O(1); ``summary`` sorts the window (``window`` periods, default 200: the
    minimum for a p99, docs/architecture.md), so call it at display rate, not per operator call.
    """

    def __init__(self, window: int = 200) -> None:
        if window < 1:
            raise ValueError(f"window={window}: pass the number of periods to summarise (>= 1)")
        self._times: deque[float] = deque(maxlen=window)
        self._over: deque[bool] = deque(maxlen=window)
        self.periods = 0
        self.over_budget_total = 0
        self.period_s: float | None = None

    def update(self, record: _HasToDict | Mapping[str, Any]) -> None:
        """Add one period (a ``PeriodRecord`` or its dict)."""
        data = record if isinstance(record, Mapping) else record.to_dict()
        over = bool(data.get("over_budget", data["processing_s"] > data["period_s"]))
        self._times.append(float(data["processing_s"]))
        self._over.append(over)
        self.periods += 1
        self.over_budget_total += over
        self.period_s = float(data["period_s"])

    def summary(self) -> dict[str, float | int | None]:
        """p50/p95/p99/max/mean processing seconds and overruns over the window (None if empty)."""
        ordered = sorted(self._times)
        stats: dict[str, float | int | None] = {
            "periods": self.periods,
            "window": len(ordered),
            "period_s": self.period_s,
            "over_budget": sum(self._over),
            "over_budget_total": self.over_budget_total,
        }
        for name, q in (("p50_s", 0.5), ("p95_s", 0.95), ("p99_s", 0.99)):
            stats[name] = percentile(ordered, q) if ordered else None
        stats["max_s"] = ordered[-1] if ordered else None
        stats["mean_s"] = sum(ordered) / len(ordered) if ordered else None
        return stats

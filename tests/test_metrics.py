"""Metrics: operator spans, period records, replay-counter deltas, memory and cadence stats.

CPU tests drive ``Metrics`` with an injected clock so every duration is exact; the GPU tests
check CUDA-event timing (one synchronize per period) and host fallback inside a graph capture.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from engine.metrics import (
    CadenceStats,
    Metrics,
    PeriodRecord,
    memory_stats,
    replay_delta,
    replay_totals,
)


def fake_clock(start: float = 100.0) -> tuple[Callable[[], float], Callable[[float], None]]:
    """A clock that moves only when told: ``advance(seconds)``."""
    now = [start]

    def clock() -> float:
        return now[0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    return clock, advance


def test_spans_nest_and_accumulate() -> None:
    clock, advance = fake_clock()
    metrics = Metrics(period_s=1.0, clock=clock)
    advance(0.5)  # session started 0.5 s before the first period
    metrics.begin_period()
    with metrics.span("flow"):
        advance(0.010)
        with metrics.time("estimator"):
            advance(0.020)
        with metrics.span("estimator"):
            advance(0.030)
        advance(0.005)
    with metrics.span("vocoder"):
        advance(0.040)
    record = metrics.end_period()

    names = [(s["name"], s["depth"]) for s in record.spans]
    assert names == [("flow", 0), ("estimator", 1), ("estimator", 1), ("vocoder", 0)]
    assert [s["clock"] for s in record.spans] == ["host"] * 4
    assert [s["start_us"] for s in record.spans] == pytest.approx([5e5, 5.1e5, 5.3e5, 5.65e5])
    ms = record.op_ms()
    assert ms == pytest.approx({"flow": 65.0, "estimator": 50.0, "vocoder": 40.0})
    # A parent's time covers its children's: nesting, not double counting in the period.
    assert record.processing_s == pytest.approx(0.105)


def test_period_budget_and_index() -> None:
    clock, advance = fake_clock()
    metrics = Metrics(period_s=0.08, clock=clock, arm="SRc")
    records = []
    for took in (0.05, 0.09, 0.08):
        metrics.begin_period()
        advance(took)
        records.append(metrics.end_period())
        advance(0.01)  # idle between periods is not processing time
    assert [r.index for r in records] == [0, 1, 2]
    assert [r.over_budget for r in records] == [False, True, False]
    assert [r.slack_s for r in records] == pytest.approx([0.03, -0.01, 0.0])
    assert records[1].start_us == pytest.approx(6e4)
    assert {r.arm for r in records} == {"SRc"}


def test_end_without_begin_and_bad_period_raise() -> None:
    with pytest.raises(RuntimeError, match="begin_period"):
        Metrics(period_s=1.0).end_period()
    with pytest.raises(ValueError, match="native period"):
        Metrics(period_s=0.0)


def test_open_span_carries_to_next_period() -> None:
    clock, advance = fake_clock()
    metrics = Metrics(period_s=1.0, clock=clock)
    metrics.begin_period()
    with metrics.span("long"):
        advance(0.1)
        first = metrics.end_period()
        metrics.begin_period()
    second = metrics.end_period()
    assert first.spans == []
    assert [s["name"] for s in second.spans] == ["long"]


SNAP_A: dict[str, Any] = {
    "total": {"hits": 3, "misses": {"not_in_catalog": 1}, "captures": 2, "capture_s": 0.5},
    "ops": {"flow": {"hits": 3, "misses": {"not_in_catalog": 1}, "captures": 2}},
    "enabled": True,
    "sealed": "no",
}
SNAP_B: dict[str, Any] = {
    "total": {
        "hits": 10,
        "misses": {"not_in_catalog": 2, "drift": 1},
        "captures": 2,
        "invalidations": 1,
        "capture_s": 0.75,
    },
    "ops": {
        "flow": {"hits": 7, "misses": {"not_in_catalog": 2}, "captures": 2},
        "hift": {"hits": 3, "misses": {"drift": 1}, "invalidations": 1},
    },
    "enabled": True,
    "sealed": "yes",
}


def test_replay_delta_and_totals() -> None:
    delta = replay_delta(SNAP_A, SNAP_B)
    assert delta["total"] == {
        "hits": 7,
        "misses": {"not_in_catalog": 1, "drift": 1},
        "captures": 0,
        "invalidations": 1,
        "capture_s": 0.25,
    }
    assert delta["ops"]["hift"]["hits"] == 3  # operator absent before: baseline 0
    assert "enabled" not in delta and "sealed" not in delta  # not counters
    totals = replay_totals(delta)
    assert totals["hits"] == 7 and totals["misses"] == 2
    assert totals["misses.drift"] == 1 and totals["rejections"] == 0
    # Without a "total" entry the operators are summed; a flat snapshot is its own total.
    assert replay_totals({"ops": delta["ops"]})["hits"] == 7
    assert replay_totals({"hits": 4, "misses": 2})["misses"] == 2
    # A counter that went down was reset in between: its delta is its new value.
    assert replay_delta({"hits": 9}, {"hits": 2}) == {"hits": 2}


def test_end_period_diffs_replay_snapshots_and_events() -> None:
    clock, advance = fake_clock()
    metrics = Metrics(period_s=1.0, clock=clock)

    @dataclass(frozen=True)
    class Event:  # the replay engine's ReplayEvent shape
        kind: str
        op: str
        reason: str
        t: float
        detail: str

        def to_dict(self) -> dict[str, Any]:
            return dict(self.__dict__)

    metrics.begin_period(replay=SNAP_A)
    advance(0.2)
    metrics.set_arm("SR", reason="settings")
    capture = Event("capture", "flow", "", clock(), "sig#1")
    drift = {"kind": "invalidation", "op": "hift", "reason": "drift", "t": clock(), "detail": ""}
    record = metrics.end_period(replay=SNAP_B, events=[capture, drift])
    assert record.replay["total"]["hits"] == 7
    assert [e["kind"] for e in record.events] == ["arm_switch", "capture", "invalidation"]
    assert all(e["ts_us"] == pytest.approx(2e5) and "t" not in e for e in record.events)
    assert record.arm == "SR"
    # The next period diffs against the snapshot given here.
    metrics.begin_period()
    assert metrics.end_period(replay=SNAP_B).replay["total"]["hits"] == 0


def test_record_is_plain_json_and_round_trips() -> None:
    clock, advance = fake_clock()
    metrics = Metrics(period_s=1.0, clock=clock)
    metrics.begin_period(replay={})
    with metrics.span("flow"):
        advance(0.3)
    record = metrics.end_period(replay=SNAP_B)
    text = json.dumps(record.to_dict(), allow_nan=False)
    assert PeriodRecord.from_dict(json.loads(text)) == record
    with pytest.raises(ValueError, match=r"PeriodRecord\.to_dict"):
        PeriodRecord.from_dict({"index": 0})


def test_cpu_memory_is_resident_set() -> None:
    stats = memory_stats(torch.device("cpu"))
    assert stats["rss_bytes"] > 1 << 20 and stats["peak_rss_bytes"] >= stats["rss_bytes"] // 2


def test_cadence_stats_window_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    times = rng.uniform(0.5, 1.5, size=500)
    stats = CadenceStats(window=200)
    assert stats.summary()["p50_s"] is None
    for i, t in enumerate(times):
        stats.update({"index": i, "period_s": 1.0, "processing_s": float(t)})
    summary = stats.summary()
    window = times[-200:]
    assert summary["window"] == 200 and summary["periods"] == 500
    for key, q in (("p50_s", 50), ("p95_s", 95), ("p99_s", 99)):
        assert summary[key] == pytest.approx(np.percentile(window, q))
    assert summary["max_s"] == pytest.approx(window.max())
    assert summary["over_budget"] == int((window > 1.0).sum())
    assert summary["over_budget_total"] == int((times > 1.0).sum())


@pytest.mark.gpu
def test_cuda_spans_use_events_resolved_once_per_period() -> None:
    device = torch.device("cuda")
    metrics = Metrics(period_s=1.0, device=device, reset_peak=True)
    x = torch.randn(2048, 2048, device=device)
    for _ in range(3):
        metrics.begin_period()
        with metrics.span("outer"):
            with metrics.span("matmul"):
                y = x @ x
            z = y.relu()
        record = metrics.end_period()
    del z
    spans = record.spans
    assert [(s["name"], s["clock"]) for s in spans] == [("outer", "device"), ("matmul", "device")]
    outer, inner = spans
    assert inner["dur_us"] > 0 and outer["dur_us"] >= inner["dur_us"]
    assert outer["start_us"] <= inner["start_us"] + 1.0
    assert record.processing_s > 0 and record.start_us > 0
    assert set(record.memory) == {
        "allocated_bytes",
        "reserved_bytes",
        "peak_bytes",
        "peak_reserved_bytes",
    }
    assert record.memory["peak_bytes"] >= record.memory["allocated_bytes"] > 0


@pytest.mark.gpu
def test_span_inside_graph_capture_times_on_host() -> None:
    """An event recorded into a capture would become a graph node: the span falls back."""
    device = torch.device("cuda")
    metrics = Metrics(period_s=1.0, device=device)
    x = torch.randn(256, 256, device=device)
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x @ x  # warm-up on the capture's stream (cuBLAS workspaces are per stream)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    metrics.begin_period()
    with torch.cuda.graph(graph, stream=side), metrics.span("captured"):
        y = x @ x
    x.copy_(torch.randn_like(x))
    graph.replay()
    record = metrics.end_period()
    assert [(s["name"], s["clock"]) for s in record.spans] == [("captured", "host")]
    # The replay ran with the new input (a liveness check, not an exactness test).
    torch.testing.assert_close(y, x @ x)

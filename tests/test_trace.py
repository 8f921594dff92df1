"""Session trace: durable JSONL while running, Perfetto/Chrome JSON and CSV on export.

All on CPU with small synthetic sessions; the kill test spawns a child that imports only
``engine.trace`` (no torch), so it starts in well under a second.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.metrics import Metrics, PeriodRecord
from engine.trace import TraceError, TraceWriter, read_trace, session_metadata
from engine.trace_export import (
    chrome_trace_problems,
    export_csv,
    export_perfetto,
    to_chrome_trace,
    validate_chrome_trace,
    write_chrome_trace,
    write_csv,
)

REPO = Path(__file__).resolve().parents[1]


def make_session(periods: int = 4) -> tuple[dict[str, Any], list[PeriodRecord]]:
    """A synthetic session: nested spans, replay counters, a capture, a drift, an arm switch."""
    now = [10.0]

    def clock() -> float:
        return now[0]

    metrics = Metrics(period_s=1.0, clock=clock, arm="SRc")
    snap: dict[str, Any] = {"total": {"hits": 0, "misses": {}}, "ops": {}}
    metrics.begin_period(replay=snap)
    records = []
    for i in range(periods):
        metrics.begin_period()
        with metrics.span("flow"):
            now[0] += 0.1
            with metrics.span("estimator"):
                now[0] += 0.3 if i != 2 else 1.0  # period 2 overruns its budget
        with metrics.span("hift"):
            now[0] += 0.05
        hits = snap["total"]["hits"] + (0 if i == 0 else 10)
        snap = {"total": {"hits": hits, "misses": {"not_in_catalog": i}, "captures": 1}}
        events = [{"kind": "capture", "op": "flow", "reason": "", "t": now[0], "detail": "s1"}]
        if i == 1:
            events.append(
                {"kind": "invalidation", "op": "flow", "reason": "drift", "t": now[0], "detail": ""}
            )
            metrics.set_arm("SR", reason="user")
        records.append(metrics.end_period(replay=snap, events=events))
        now[0] += 0.5
    header = session_metadata(declaration="toy", arm="SRc", settings={"voice": "default"})
    return header, records


def write_session(path: Path, periods: int = 4) -> list[PeriodRecord]:
    header, records = make_session(periods)
    with TraceWriter(path, header) as writer:
        for record in records:
            writer.write(record)
    return records


def test_period_records_round_trip_through_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    records = write_session(path)
    header, read = read_trace(path)
    assert header["declaration"] == "toy" and header["settings"] == {"voice": "default"}
    assert {"gpu", "torch", "python", "start_wall_time", "arm"} <= header.keys()
    assert [PeriodRecord.from_dict(r) for r in read] == records
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "header" and len(lines) == 1 + len(records)


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("missing/s.jsonl", "mkdir -p"),
        ("s.json", "must end in .jsonl"),
        (".", "is a directory"),
        ("exists.jsonl", "overwrite=True"),
    ],
)
def test_malformed_paths_raise_before_the_session(tmp_path: Path, name: str, fix: str) -> None:
    (tmp_path / "exists.jsonl").write_text("previous session\n")
    path = tmp_path / name
    with pytest.raises(TraceError, match=fix) as info:
        TraceWriter(path, {"declaration": "toy"})
    assert str(path.parent if name.startswith("missing") else path) in str(info.value)
    assert (tmp_path / "exists.jsonl").read_text() == "previous session\n"


def test_unwritable_folder_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulated: as root (CI containers) a chmod'ed folder is still writable.
    monkeypatch.setattr("engine.trace.os.access", lambda *_: False)
    with pytest.raises(TraceError, match="not writable"):
        TraceWriter(tmp_path / "s.jsonl", {})


def test_non_json_record_raises_and_leaves_the_trace_readable(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with TraceWriter(path, {"declaration": "toy"}) as writer:
        writer.write({"index": 0, "period_s": 1.0, "processing_s": 0.5})
        with pytest.raises(TraceError, match="NaN"):
            writer.write({"index": 1, "period_s": 1.0, "processing_s": float("nan")})
        with pytest.raises(TraceError, match="tolist"):
            writer.write({"index": 1, "period_s": 1.0, "processing_s": object()})
    assert writer.closed
    with pytest.raises(TraceError, match="closed"):
        writer.write({"index": 2})
    assert [r["index"] for r in read_trace(path)[1]] == [0]


def test_truncated_tail_is_tolerated_but_corruption_is_not(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_session(path, periods=3)
    with open(path, "a") as f:
        f.write('{"type":"period","index":3,"period_')  # the period in flight at a kill
    assert [r["index"] for r in read_trace(path)[1]] == [0, 1, 2]
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:20]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=":2 is not valid JSON"):
        read_trace(path)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(TraceError, match="no header"):
        read_trace(tmp_path / "empty.jsonl")


CHILD = """
import sys, time
sys.path.insert(0, sys.argv[2])
from engine.trace import TraceWriter
with TraceWriter(sys.argv[1], {"declaration": "toy"}) as writer:
    for i in range(100000):
        writer.write({"index": i, "period_s": 0.01, "processing_s": 0.001, "pad": "x" * 4000})
        print(i, flush=True)  # the write returned: this period must survive a kill
        time.sleep(0.002)
"""


def test_killed_writer_loses_at_most_the_period_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "killed.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(REPO)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    try:
        for line in child.stdout:
            if int(line) >= 30:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    acked = [int(line) for line in child.stdout.read().split()]
    last_acked = max([30, *acked])
    _, records = read_trace(path)
    indices = [r["index"] for r in records]
    assert indices == list(range(len(indices))), "periods must be whole and in order"
    assert last_acked + 1 <= len(indices) <= last_acked + 2


def exported(tmp_path: Path) -> tuple[dict[str, Any], list[PeriodRecord]]:
    path = tmp_path / "s.jsonl"
    records = write_session(path)
    out = export_perfetto(path, tmp_path / "s.json")
    return json.loads(out.read_text()), records


def test_perfetto_export_passes_the_validator(tmp_path: Path) -> None:
    trace, records = exported(tmp_path)
    validate_chrome_trace(trace)
    events = trace["traceEvents"]
    by_ph: dict[str, set[str]] = {}
    for e in events:
        by_ph.setdefault(e["ph"], set()).add(e["name"])
    assert by_ph["X"] == {"period", "flow", "estimator", "hift"}
    assert by_ph["C"] == {"memory", "cadence", "replay"}
    assert by_ph["i"] == {"capture flow", "invalidation flow", "arm_switch"}
    assert {"process_name", "process_labels", "thread_name"} <= by_ph["M"]
    periods = [e for e in events if e["name"] == "period"]
    assert len(periods) == len(records)
    assert [p["args"]["over_budget"] for p in periods] == [False, False, True, False]
    assert periods[0]["dur"] == pytest.approx(0.45e6)
    process = next(e for e in events if e["name"] == "process_name")
    assert process["args"]["declaration"] == "toy" and "torch" in process["args"]
    assert trace["metadata"]["declaration"] == "toy" and trace["displayTimeUnit"] == "ms"
    replay = [e["args"] for e in events if e["name"] == "replay"]
    assert [a["hits"] for a in replay] == [0, 10, 10, 10]
    switch = next(e for e in events if e["name"] == "arm_switch")
    assert switch["s"] == "g" and switch["args"]["detail"] == "SRc -> SR"


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda e: e.pop("dur"), "lacks 'dur'"),
        (lambda e: e.update(dur=-1), "need a number >= 0"),
        (lambda e: e.update(ph="B"), "ph='B'"),
    ],
)
def test_validator_catches_broken_slices(tmp_path: Path, mutate: Any, problem: str) -> None:
    trace, _ = exported(tmp_path)
    mutate(next(e for e in trace["traceEvents"] if e["name"] == "estimator"))
    assert any(problem in p for p in chrome_trace_problems(trace))
    with pytest.raises(TraceError, match="invalid Chrome trace"):
        validate_chrome_trace(trace)


def test_validator_catches_counters_order_and_overlap() -> None:
    def x(ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "name": "op", "ts": ts, "dur": dur, "pid": 1, "tid": 2}

    counter = {"ph": "C", "name": "memory", "ts": 0, "pid": 1, "args": {"peak": "big"}}
    problems = chrome_trace_problems({"traceEvents": [counter, x(10, 5), x(5, 1), x(20, 10)]})
    problems += chrome_trace_problems({"traceEvents": [x(0, 10), x(5, 10)]})
    assert any("'peak' is not a number" in p for p in problems)
    assert any("starts before its predecessor" in p for p in problems)
    assert any("overlaps its parent" in p for p in problems)
    assert chrome_trace_problems({"events": []}) != []
    assert chrome_trace_problems({"traceEvents": [x(0, 10), x(2, 3), x(5, 5), x(10, 1)]}) == []


def test_csv_has_one_flat_row_per_period(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    records = write_session(path)
    out = export_csv(path, tmp_path / "s.csv")
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records)
    assert [int(r["index"]) for r in rows] == [r.index for r in records]
    assert float(rows[0]["op_ms.estimator"]) == pytest.approx(300.0)
    assert rows[1]["op_calls.flow"] == "1" and rows[2]["over_budget"] == "True"
    assert rows[0]["misses.not_in_catalog"] == "0" and rows[3]["misses.not_in_catalog"] == "1"
    assert float(rows[1]["hits"]) == 10 and int(rows[0]["memory.rss_bytes"]) > 0
    assert rows[1]["events"] == "3"  # capture, invalidation, arm switch


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("writer failed midway")


def test_exports_are_atomic(tmp_path: Path) -> None:
    json_out, csv_out = tmp_path / "t.json", tmp_path / "t.csv"
    json_out.write_text("earlier export")
    csv_out.write_text("earlier export")
    header, records = make_session(2)
    trace = to_chrome_trace(header, [r.to_dict() for r in records])
    trace["traceEvents"].append({"ph": "i", "args": {"bad": {1, 2}}})  # a set: not JSON
    with pytest.raises(TypeError):
        write_chrome_trace(trace, json_out)
    rows: list[dict[str, Any]] = [{"index": i} for i in range(1000)] + [{"index": Unprintable()}]
    with pytest.raises(RuntimeError, match="midway"):
        write_csv(rows, csv_out)
    assert json_out.read_text() == "earlier export" and csv_out.read_text() == "earlier export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.json"]
    with pytest.raises(TraceError, match=r"use .*t\.json"):
        write_chrome_trace({"traceEvents": []}, tmp_path / "t.txt")


@pytest.mark.gpu
def test_cuda_session_exports_a_valid_perfetto_trace(tmp_path: Path) -> None:
    """Device spans resolved from CUDA events must nest on their track, as Perfetto needs."""
    import torch

    device = torch.device("cuda")
    metrics = Metrics(period_s=0.08, device=device, arm="eager", reset_peak=True)
    header = session_metadata(declaration="toy", arm="eager", device="cuda")
    x = torch.randn(1024, 1024, device=device)
    with TraceWriter(tmp_path / "gpu.jsonl", header) as writer:
        for _ in range(20):
            metrics.begin_period()
            with metrics.span("step"):
                for _ in range(3):
                    with metrics.span("matmul"):
                        x = torch.tanh(x @ x)
                with metrics.span("tail"):
                    x = x * 0.5
            writer.write(metrics.end_period())
    out = export_perfetto(tmp_path / "gpu.jsonl", tmp_path / "gpu.json")
    trace = json.loads(out.read_text())
    validate_chrome_trace(trace)
    device_slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == 3]
    assert len(device_slices) == 20 * 5
    assert header["gpu"] != "none" and trace["metadata"]["gpu"] == header["gpu"]


def test_streamed_perfetto_export_is_the_whole_sort(tmp_path: Path) -> None:
    """The export streams period by period, yet writes the bytes one sort of everything gives,
    also for a trace whose periods are not in time order (it then sorts whole)."""
    path = tmp_path / "s.jsonl"
    header, records = make_session(6)
    dicts = [r.to_dict() for r in records]
    dicts[4]["events"].append({"kind": "capture", "op": "late", "ts_us": 1.0})  # time went back
    for name, rows in (("ordered", dicts[:4]), ("unordered", dicts)):
        with TraceWriter(path, header, overwrite=True) as writer:
            for row in rows:
                writer.write(row)
        streamed = export_perfetto(path, tmp_path / f"{name}.json").read_bytes()
        whole = write_chrome_trace(to_chrome_trace(*read_trace(path)), tmp_path / "whole.json")
        assert streamed == whole.read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ordered.json", "s.jsonl", "unordered.json", "whole.json"
    ]  # fmt: skip

"""Export a session trace to Chrome/Perfetto JSON (ui.perfetto.dev opens it) and to CSV.

Perfetto track layout (one process, ``pid`` from the header):

    tid 1 "cadence"            X per period (host wall time), args: arm, slack, over budget
    tid 2 "operators (host)"   X per operator call timed with perf_counter
    tid 3 "operators (device)" X per operator call timed with CUDA events
    tid 4 "replay events"      i per capture, invalidation, fallback, rejection, arm switch
    counters (per process)     C "memory" (MiB), "cadence" (ms), "replay" (per-period counts);
                               Perfetto names each track "<name> <key>", e.g. "memory peak_MiB"

Timestamps are µs since the session start. Both exports stream (the memory of a few periods,
whatever the session's length) and are atomic: they write a temporary
file in the destination folder and ``os.replace`` it, so a failure midway leaves no partial
file and never damages an earlier export of the same name.
"""

from __future__ import annotations

import contextlib
import csv
import heapq
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from engine.cadence import replay_totals
from engine.files import OutputError, atomic_write
from engine.sizes import MIB
from engine.trace import TraceError, read_trace, stream_trace

__all__ = [
    "chrome_trace_problems",
    "csv_rows",
    "export_csv",
    "export_perfetto",
    "to_chrome_trace",
    "validate_chrome_trace",
    "write_chrome_trace",
    "write_csv",
]

TRACKS = {1: "cadence", 2: "operators (host)", 3: "operators (device)", 4: "replay events"}
_SPAN_TID = {"host": 2, "device": 3}
# Events that concern the whole session (not one operator) get global scope in the viewer.
_GLOBAL_KINDS = frozenset({"arm_switch"})


def _us(value: float) -> float:
    """µs rounded to ns: exact enough, and keeps the JSON small."""
    return round(float(value), 3)


def _event(ph: str, name: str, pid: int, tid: int, ts: float, **fields: Any) -> dict[str, Any]:
    return {"ph": ph, "name": name, "pid": pid, "tid": tid, "ts": ts, **fields}


def _metadata_events(header: Mapping[str, Any], pid: int) -> list[dict[str, Any]]:
    """Name the process after the session and each track; carry the facts as args too."""
    facts = {k: header.get(k) for k in ("declaration", "arm", "gpu", "torch", "device")}
    name = f"DuplexCadence {facts['declaration']} [{facts['arm']}]"
    labels = ", ".join(f"{k}={v}" for k, v in facts.items() if k != "declaration")
    events = [
        _event("M", "process_name", pid, 0, 0, args={"name": name, **facts}),
        _event("M", "process_labels", pid, 0, 0, args={"labels": labels}),
    ]
    for tid, track in TRACKS.items():
        events.append(_event("M", "thread_name", pid, tid, 0, args={"name": track}))
        events.append(_event("M", "thread_sort_index", pid, tid, 0, args={"sort_index": tid}))
    return events


def _period_slice(record: Mapping[str, Any], pid: int) -> dict[str, Any]:
    """The period's own X slice on the cadence track; over-budget periods are coloured."""
    over = bool(record.get("over_budget", False))
    args = {
        "index": record["index"],
        "arm": record.get("arm"),
        "over_budget": over,
        "slack_ms": float(record.get("slack_s", 0.0)) * 1e3,
    }
    loop = record.get("loop", {})
    if loop.get("heard"):  # what the user said, as the family's recognizer heard it
        args["heard"] = loop["heard"]
    if loop.get("text"):  # what the assistant said in this period (families with text)
        args["text"] = loop["text"]
    start, dur = float(record.get("start_us", 0.0)), float(record["processing_s"]) * 1e6
    period = _event("X", "period", pid, 1, _us(start), dur=_us(dur), cat="cadence", args=args)
    if over:
        period["cname"] = "terrible"  # Chrome's reserved red; Perfetto ignores it harmlessly
    return period


def _period_events(record: Mapping[str, Any], pid: int) -> list[dict[str, Any]]:
    """The X slice of one period, its counters, its operator calls and its instant events."""
    period = _period_slice(record, pid)
    events = [period, *_counter_events(record, pid, _us(period["ts"] + period["dur"]))]
    for span in record.get("spans", []):
        tid = _SPAN_TID.get(span.get("clock", "host"), 2)
        dur = _us(max(float(span["dur_us"]), 0.0))
        args = {"period": record["index"], "depth": span.get("depth", 0)}
        ts = _us(span["start_us"])
        events.append(_event("X", span["name"], pid, tid, ts, dur=dur, cat="operator", args=args))
    for event in record.get("events", []):
        kind, op = str(event.get("kind", "event")), str(event.get("op") or "")
        scope = "g" if kind in _GLOBAL_KINDS else "p"
        args = {k: v for k, v in event.items() if k not in ("ts_us", "t")}
        ts = _us(event.get("ts_us", period["ts"]))
        events.append(
            _event("i", f"{kind} {op}".strip(), pid, 4, ts, s=scope, cat="replay", args=args)
        )
    return events


def _counter_events(record: Mapping[str, Any], pid: int, ts: float) -> list[dict[str, Any]]:
    """Memory (MiB), cadence (ms) and replay counters, sampled at the period's end."""
    memory = {
        k.removesuffix("_bytes") + "_MiB": v / MIB
        for k, v in record.get("memory", {}).items()
        if isinstance(v, int | float)
    }
    cadence = {
        "processing_ms": float(record["processing_s"]) * 1e3,
        "period_ms": float(record["period_s"]) * 1e3,
        "slack_ms": float(record.get("slack_s", 0.0)) * 1e3,
    }
    totals = replay_totals(record.get("replay", {}))
    counts = ("hits", "misses", "captures", "invalidations", "rejections", "fallbacks")
    replay = {k: totals[k] for k in counts}
    named = (("memory", memory), ("cadence", cadence), ("replay", replay))
    return [_event("C", name, pid, 0, ts, args=args) for name, args in named if args]


def to_chrome_trace(
    header: Mapping[str, Any], records: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """The Chrome JSON object for a trace: metadata events first, the rest sorted by time."""
    pid = header["pid"] if isinstance(header.get("pid"), int) else 1
    timed = [e for record in records for e in _period_events(record, pid)]
    # Sort by start, longer first at equal starts, so parents precede the slices they contain.
    timed.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    return {
        "traceEvents": _metadata_events(header, pid) + timed,
        "displayTimeUnit": "ms",
        "metadata": dict(header),
    }


def _atomic_write(
    out: Path, suffix: str, write: Callable[[IO[str]], None], overwrite: bool = True
) -> Path:
    """Write via a private temp file in ``out``'s folder and a rename; never a partial ``out``.

    ``overwrite=False`` refuses a file already at ``out`` (derived files beside a trace must not
    replace unrelated ones silently)."""
    if out.suffix != suffix:
        raise TraceError(f"export path {out} must end in {suffix}: use {out.with_suffix(suffix)}")
    if not out.parent.is_dir():
        raise TraceError(f"export folder {out.parent} does not exist: create it first")
    try:
        return atomic_write(out, write, text=True, overwrite=overwrite)
    except OutputError as error:
        raise TraceError(f"export {error}") from None


def write_chrome_trace(
    obj: Mapping[str, Any], out: str | os.PathLike[str], *, overwrite: bool = True
) -> Path:
    """Write a Chrome JSON object atomically (strict JSON: NaN or a non-JSON value raises)."""
    return _atomic_write(
        Path(out), ".json", lambda f: json.dump(obj, f, allow_nan=False), overwrite
    )


def export_perfetto(
    jsonl_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *, overwrite: bool = True
) -> Path:
    """Export a JSONL trace to a Chrome/Perfetto ``.json`` file; returns its path.

    Streamed: the trace is read and the events written a period at a time (:func:`_in_order`),
    so a session of any length exports in the memory of a few periods. The file is the one
    :func:`to_chrome_trace` and :func:`write_chrome_trace` give; a trace whose periods are not
    in time order (never one ``converse`` or ``synth`` wrote) is exported that way, whole.
    """
    header, records = stream_trace(jsonl_path)
    pid = header["pid"] if isinstance(header.get("pid"), int) else 1

    def write(f: IO[str]) -> None:
        with _malformed(jsonl_path):
            f.write('{"traceEvents": [')
            separator = ""
            for event in itertools.chain(_metadata_events(header, pid), _in_order(records, pid)):
                f.write(separator + json.dumps(event, allow_nan=False))
                separator = ", "
            tail = json.dumps(dict(header), allow_nan=False)
            f.write(f'], "displayTimeUnit": "ms", "metadata": {tail}}}')

    try:
        return _atomic_write(Path(out_path), ".json", write, overwrite)
    except _OutOfOrder:
        whole_header, whole = read_trace(jsonl_path)
        with _malformed(jsonl_path):
            chrome = to_chrome_trace(whole_header, whole)
        return write_chrome_trace(chrome, out_path, overwrite=overwrite)


class _OutOfOrder(Exception):
    """A period holds an event earlier than one already written (the export then sorts whole)."""


def _in_order(records: Iterable[Mapping[str, Any]], pid: int) -> Iterator[dict[str, Any]]:
    """The periods' events in :func:`to_chrome_trace`'s order (by start, longer first, stable),
    holding back only what a later period could still precede: an event is let out once a
    period starts after it. Raises ``_OutOfOrder`` if a period breaks that (time went back)."""
    pending: list[tuple[float, float, int, dict[str, Any]]] = []
    last: tuple[float, float] | None = None
    order = itertools.count()
    for record in records:
        events = _period_events(record, pid)
        keys = [(e["ts"], -e.get("dur", 0)) for e in events]
        if last is not None and min(keys) < last:
            raise _OutOfOrder
        floor = min(ts for ts, _ in keys)
        while pending and pending[0][0] < floor:
            ts, minus_dur, _, event = heapq.heappop(pending)
            last = (ts, minus_dur)
            yield event
        for event, (ts, minus_dur) in zip(events, keys, strict=True):
            heapq.heappush(pending, (ts, minus_dur, next(order), event))
    while pending:
        yield heapq.heappop(pending)[3]


def _flat(prefix: str, data: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(_flat(f"{prefix}{key}.", value))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def csv_rows(records: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """One flat row per period, as the records come: scalars, replay totals
    (``misses.<reason>``), ``memory.*``, ``op_ms.<name>`` (summed over calls),
    ``op_calls.<name>`` and the loop's scalars (``loop.phase``, ...); spans/events are counted."""
    for record in records:
        row = {k: v for k, v in record.items() if not isinstance(v, Mapping | list)}
        row.update(replay_totals(record.get("replay", {})))
        loop = record.get("loop", {})
        row.update({f"loop.{k}": v for k, v in loop.items() if not isinstance(v, Mapping | list)})
        audit = loop.get("audit", {})
        row.update({f"audit.{k}": v for k, v in audit.items() if not isinstance(v, Mapping | list)})
        row.update(_flat("memory.", record.get("memory", {})))
        for span in record.get("spans", []):
            name = span["name"]
            row[f"op_ms.{name}"] = row.get(f"op_ms.{name}", 0.0) + float(span["dur_us"]) / 1e3
            row[f"op_calls.{name}"] = row.get(f"op_calls.{name}", 0) + 1
        row["events"] = len(record.get("events", []))
        yield row


def write_csv(
    rows: Iterable[dict[str, Any]],
    out: str | os.PathLike[str],
    *,
    columns: Sequence[str] | None = None,
    overwrite: bool = True,
) -> Path:
    """Write rows atomically; columns (default: the union in first-seen order, which needs the
    rows twice) are the header, gaps left empty."""
    if columns is None:
        rows = list(rows)
        columns = list(dict.fromkeys(key for row in rows for key in row))

    def write(f: IO[str]) -> None:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)

    return _atomic_write(Path(out), ".csv", write, overwrite)


def export_csv(
    jsonl_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *, overwrite: bool = True
) -> Path:
    """Export a JSONL trace to a ``.csv`` with one row per period; returns its path.

    Streamed in two passes over the trace (the columns, then the rows): a session of any length
    exports in the memory of one period. The second pass stops at the first one's count, so a
    trace still being written exports as it was at the first pass.
    """
    _, records = stream_trace(jsonl_path)
    with _malformed(jsonl_path):
        columns: dict[str, None] = {}
        periods = 0
        for row in csv_rows(records):
            columns.update(dict.fromkeys(row))
            periods += 1
    _, again = stream_trace(jsonl_path)
    rows = csv_rows(itertools.islice(again, periods))
    with _malformed(jsonl_path):
        return write_csv(rows, out_path, columns=list(columns), overwrite=overwrite)


@contextlib.contextmanager
def _malformed(path: str | os.PathLike[str]) -> Iterator[None]:
    """A record without the fields a period has: one line naming the trace, not a traceback."""
    try:
        yield
    except TraceError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise TraceError(
            f"{path}: a period record is malformed ({type(error).__name__}: {error}): "
            "export only traces written by converse or synth"
        ) from None


def _event_problems(i: int, e: Any) -> list[str]:
    if not isinstance(e, Mapping):
        return [f"event {i} is not an object"]
    ph = e.get("ph")
    need = {
        "X": ("name", "ts", "dur", "pid", "tid"),
        "C": ("name", "ts", "pid", "args"),
        "i": ("name", "ts", "pid", "tid"),
        "M": ("name", "pid", "args"),
    }.get(str(ph))
    if need is None:
        return [f"event {i} has ph={ph!r}; this exporter emits only X, C, i and M"]
    problems = [f"event {i} ({ph}) lacks {k!r}" for k in need if k not in e]
    for key in ("ts", "dur"):
        if key in e and not (isinstance(e[key], int | float) and e[key] >= 0):
            problems.append(f"event {i} ({ph}) has {key}={e[key]!r}; need a number >= 0 (µs)")
    args = e.get("args")
    if ph == "C" and isinstance(args, Mapping):
        bad = [k for k, v in args.items() if not isinstance(v, int | float) or isinstance(v, bool)]
        problems += [f"counter {e.get('name')!r} arg {k!r} is not a number" for k in bad]
    if ph == "M" and not isinstance(args, Mapping):
        problems.append(f"metadata event {i} args must be an object")
    if ph == "i" and e.get("s", "t") not in ("g", "p", "t"):
        problems.append(f"instant event {i} has scope {e.get('s')!r}; use g, p or t")
    return problems


def _nesting_problems(events: list[Mapping[str, Any]]) -> list[str]:
    """X slices on one track must start in order and nest (Perfetto drops overlapping ones)."""
    problems: list[str] = []
    open_ends: dict[tuple[Any, Any], list[float]] = {}
    last_ts: dict[tuple[Any, Any], float] = {}
    for e in events:
        if e.get("ph") != "X" or not isinstance(e.get("ts"), int | float):
            continue
        track, ts, end = (e.get("pid"), e.get("tid")), e["ts"], e["ts"] + e.get("dur", 0)
        if ts < last_ts.get(track, ts):
            problems.append(f"X {e.get('name')!r} at {ts} starts before its predecessor on {track}")
        last_ts[track] = ts
        stack = open_ends.setdefault(track, [])
        while stack and stack[-1] <= ts:
            stack.pop()
        if stack and end > stack[-1] + 1.0:  # 1 µs: CUDA event resolution is ~0.5 µs
            problems.append(f"X {e.get('name')!r} at {ts} overlaps its parent on {track}")
        stack.append(end)
    return problems


def chrome_trace_problems(obj: Any) -> list[str]:
    """Everything in ``obj`` that would keep Perfetto from loading it as we intend (empty: ok)."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("traceEvents"), list):
        return ["not a Chrome JSON object: need {'traceEvents': [...]}"]
    events = obj["traceEvents"]
    problems = [p for i, e in enumerate(events) for p in _event_problems(i, e)]
    if obj.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit {obj['displayTimeUnit']!r} must be 'ms' or 'ns'")
    return problems + _nesting_problems([e for e in events if isinstance(e, Mapping)])


def validate_chrome_trace(obj: Any) -> None:
    """Raise ``TraceError`` listing every structural problem of a Chrome/Perfetto trace."""
    problems = chrome_trace_problems(obj)
    if problems:
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise TraceError(f"invalid Chrome trace ({len(problems)} problems):\n  {shown}{more}")

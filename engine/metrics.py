"""Cadence, per-operator timings, replay counters and memory, one record per native period.

The runtime's unit of account is the model's native period (1.0 s for Token2Wav, 0.08 s for
Moshi): a unit keeps cadence when its processing time fits inside the period. ``Metrics`` times
operator calls inside a period and closes each period into a ``PeriodRecord`` of plain Python
values that the trace (``engine.trace``) writes as one JSON line and the live panel reads.

Usage, on the engine thread that owns every CUDA call::

    metrics = Metrics(period_s=1.0, device=device, arm="SRc")
    metrics.begin_period(replay=engine.snapshot())
    with metrics.span("flow"):
        ...
    record = metrics.end_period(replay=engine.snapshot(), events=engine.drain_events())

Constraints:
    * One thread. ``Metrics`` is not thread-safe; spans nest in call order (a stack).
    * On CUDA a span records a ``torch.cuda.Event`` pair on the current stream and is resolved
      lazily in ``end_period`` after ONE ``torch.cuda.synchronize`` per period, never per call.
      Its time is device time (when the stream ran the work), not host launch time.
    * Device times are anchored to the host at each ``begin_period`` by an origin event that
      fires at once on the idle device (the previous ``end_period`` synchronized), and are
      measured from it: ``elapsed_time`` is float32 milliseconds, precise only over short
      spans, so one origin for a whole session would blur µs after a few minutes.
    * A span opened while the current stream is capturing a CUDA graph is timed on the host
      instead: recording a timing event into a capture would put it inside the graph.
    * A span still open when ``end_period`` runs belongs to the next period.
    * ``processing_s`` is host wall time from ``begin_period`` to the end of that synchronize:
      the time the period's output took to be ready, which is what cadence means.
"""

from __future__ import annotations

import copy
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from engine.cadence import REPLAY_COUNTERS, CadenceStats, replay_delta, replay_totals

__all__ = [
    "REPLAY_COUNTERS",
    "CadenceStats",
    "Metrics",
    "PeriodRecord",
    "Span",
    "memory_stats",
    "replay_delta",
    "replay_totals",
]

Clock = Callable[[], float]


@dataclass(frozen=True)
class Span:
    """One timed operator call. Times are µs relative to the session start.

    ``clock`` is ``"device"`` (CUDA events) or ``"host"`` (``perf_counter``); ``depth`` is the
    nesting level at entry (0 = outermost), so a trace viewer can rebuild the call tree.
    """

    name: str
    start_us: float
    dur_us: float
    depth: int
    clock: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PeriodRecord:
    """What happened in one native period, as plain JSON-able values.

    ``replay`` is the DELTA of the replay engine's counters over the period (``replay_delta``);
    ``memory`` holds byte counts (GPU allocated/reserved/peak, or the process resident set on
    CPU); ``spans`` and ``events`` are plain dicts with
    session-relative ``start_us`` / ``ts_us``. ``loop`` holds what the conversation loop did in
    the period (``engine.duplex``: phase, voice probability, synthesis calls); empty elsewhere.
    """

    index: int
    period_s: float
    start_us: float
    processing_s: float
    over_budget: bool
    slack_s: float
    arm: str
    replay: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    spans: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    loop: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PeriodRecord:
        """Rebuild a record from ``to_dict`` output; unknown keys (``type``) are ignored."""
        names = cls.__dataclass_fields__.keys()
        missing = [n for n in ("index", "period_s", "processing_s") if n not in data]
        if missing:
            raise ValueError(
                f"period record lacks {missing}: pass a dict written by PeriodRecord.to_dict"
            )
        return cls(**{k: v for k, v in data.items() if k in names})

    def op_ms(self) -> dict[str, float]:
        """Milliseconds per operator name, summed over its calls in this period."""
        totals: dict[str, float] = {}
        for span in self.spans:
            totals[span["name"]] = totals.get(span["name"], 0.0) + span["dur_us"] / 1e3
        return totals


def _rss_bytes() -> int:
    """Resident set size now, from ``/proc/self/statm`` (Linux) or the peak from ``resource``."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return _peak_rss_bytes()


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def memory_stats(device: torch.device, *, reset_peak: bool = False) -> dict[str, int]:
    """Memory in bytes: CUDA allocated/reserved and their peaks, or CPU resident set and peak.

    With ``reset_peak`` the CUDA peak is reset AFTER it is read, so the next reading is the
    peak of the next phase (docs/architecture.md: peaks reset between phases). The CPU peak
    cannot reset.
    """
    if device.type == "cuda":
        stats = {
            "allocated_bytes": torch.cuda.memory_allocated(device),
            "reserved_bytes": torch.cuda.memory_reserved(device),
            "peak_bytes": torch.cuda.max_memory_allocated(device),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
        }
        if reset_peak:
            torch.cuda.reset_peak_memory_stats(device)
        return stats
    rss = _rss_bytes()
    # The kernel updates the high-water mark lazily; never report a peak below the present.
    return {"rss_bytes": rss, "peak_rss_bytes": max(rss, _peak_rss_bytes())}


@dataclass
class _Pending:
    """A span whose times are known only after the period's synchronize (CUDA) or at once."""

    name: str
    depth: int
    clock: str
    start: float | torch.cuda.Event
    end: float | torch.cuda.Event | None = None


def _recorded_event() -> torch.cuda.Event:
    """A timing event recorded now on the current CUDA stream."""
    event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    event.record()
    return event


def _event_dict(event: Any) -> dict[str, Any]:
    """A replay event (``ReplayEvent`` with ``to_dict`` or a mapping) as a plain dict."""
    if hasattr(event, "to_dict"):
        return dict(event.to_dict())
    if isinstance(event, Mapping):
        return dict(event)
    raise TypeError(
        f"event {event!r} is neither a mapping nor has to_dict(): pass ReplayEvent or a dict"
    )


class Metrics:
    """Times operator calls and closes each native period into a ``PeriodRecord``.

    Args:
        period_s: the native period the processing time is judged against (> 0).
        device: where the timed work runs; CUDA selects event timing.
        arm: the ablation arm in force (``set_arm`` switches it and logs an ``arm_switch``).
        reset_peak: reset the CUDA peak after each period's reading (per-period peaks).
        clock: host clock in seconds; ``time.perf_counter`` unless a test injects one.
    """

    def __init__(
        self,
        period_s: float,
        *,
        device: torch.device | str = "cpu",
        arm: str = "eager",
        reset_peak: bool = False,
        clock: Clock = time.perf_counter,
    ) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s={period_s!r}: pass the model's native period in seconds")
        self.period_s = float(period_s)
        self.device = torch.device(device)
        self.arm = arm
        self.reset_peak = reset_peak
        self._clock = clock
        self._cuda = self.device.type == "cuda"
        self._origin: torch.cuda.Event | None = None
        if self._cuda:
            torch.cuda.synchronize(self.device)
            self._origin = _recorded_event()
        self.t0 = clock()
        self._origin_us = 0.0
        self._index = 0
        self._period_start: float | None = None
        self._stack: list[_Pending] = []
        self._done: list[_Pending] = []
        self._events: list[dict[str, Any]] = []
        self._replay_before: Mapping[str, Any] = {}

    def now_us(self, t: float | None = None) -> float:
        """Host time ``t`` (``perf_counter`` seconds; now if None) in µs since session start."""
        return ((self._clock() if t is None else t) - self.t0) * 1e6

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Time the enclosed block as one call of operator ``name`` (nests)."""
        pending = self._open(name)
        self._stack.append(pending)
        try:
            yield
        finally:
            popped = self._stack.pop()
            assert popped is pending, "spans closed out of order: use `with metrics.span(...)`"
            self._close(pending)

    time = span

    def _open(self, name: str) -> _Pending:
        depth = len(self._stack)
        if self._cuda and not torch.cuda.is_current_stream_capturing():
            return _Pending(name, depth, "device", _recorded_event())
        return _Pending(name, depth, "host", self._clock())

    def _close(self, pending: _Pending) -> None:
        if isinstance(pending.start, torch.cuda.Event):
            pending.end = _recorded_event()
        else:
            pending.end = self._clock()
        self._done.append(pending)

    def event(
        self, kind: str, *, op: str = "", reason: str = "", detail: str = "", t: float | None = None
    ) -> None:
        """Log an instant event of the loop (e.g. ``arm_switch``) into the current period."""
        self._events.append(
            {"kind": kind, "op": op, "reason": reason, "detail": detail, "ts_us": self.now_us(t)}
        )

    def set_arm(self, arm: str, *, reason: str = "") -> None:
        """Switch the arm recorded from now on, logging an ``arm_switch`` event if it changed."""
        if arm != self.arm:
            self.event("arm_switch", reason=reason, detail=f"{self.arm} -> {arm}")
            self.arm = arm

    def begin_period(self, *, replay: Mapping[str, Any] | None = None) -> None:
        """Start the clock of the next period; ``replay`` sets the counters' baseline.

        Without ``replay`` the baseline is the snapshot given to the previous ``end_period``
        (all zeros before the first), so a loop may pass snapshots to ``end_period`` only.
        """
        if replay is not None:
            # A copy: the baseline must not move if the engine hands out a live mapping.
            self._replay_before = copy.deepcopy(dict(replay))
        self._period_start = self._clock()
        if self._cuda:
            self._origin, self._origin_us = _recorded_event(), self.now_us(self._period_start)

    def end_period(
        self, *, replay: Mapping[str, Any] | None = None, events: Iterable[Any] = ()
    ) -> PeriodRecord:
        """Close the period: one synchronize, resolve spans, read memory, diff replay counters.

        ``events`` are replay events (``ReplayEvent`` or dicts with ``t`` in ``perf_counter``
        seconds); they are stored with a session-relative ``ts_us`` instead of ``t``.
        """
        if self._period_start is None:
            raise RuntimeError("end_period without begin_period: call begin_period() first")
        if self._cuda:
            torch.cuda.synchronize(self.device)
        end = self._clock()
        processing_s = end - self._period_start
        record = PeriodRecord(
            index=self._index,
            period_s=self.period_s,
            start_us=self.now_us(self._period_start),
            processing_s=processing_s,
            over_budget=processing_s > self.period_s,
            slack_s=self.period_s - processing_s,
            arm=self.arm,
            replay=replay_delta(self._replay_before, replay) if replay is not None else {},
            memory=memory_stats(self.device, reset_peak=self.reset_peak),
            spans=self._resolved_spans(),
            events=self._events + [self._replay_event(e) for e in events],
        )
        if replay is not None:
            self._replay_before = copy.deepcopy(dict(replay))
        self._index += 1
        self._period_start = None
        self._done, self._events = [], []
        return record

    def _resolved_spans(self) -> list[dict[str, Any]]:
        # Spans finish inner-first; start order (parents before children) reads as a call tree.
        spans = sorted(
            (self._resolve(p) for p in self._done), key=lambda s: (s.start_us, -s.dur_us)
        )
        return [span.to_dict() for span in spans]

    def _replay_event(self, event: Any) -> dict[str, Any]:
        data = _event_dict(event)
        t = data.pop("t", None)
        data["ts_us"] = self.now_us(float(t)) if t is not None else self.now_us()
        return data

    def _resolve(self, pending: _Pending) -> Span:
        start, end = pending.start, pending.end
        if isinstance(start, torch.cuda.Event) and isinstance(end, torch.cuda.Event):
            assert self._origin is not None, "CUDA span without an origin event"
            # Both ends from one origin: the same quantisation keeps children inside parents.
            start_us = self._origin_us + self._origin.elapsed_time(start) * 1e3
            dur_us = self._origin_us + self._origin.elapsed_time(end) * 1e3 - start_us
        elif isinstance(start, float) and isinstance(end, float):
            start_us, dur_us = self.now_us(start), (end - start) * 1e6
        else:
            raise AssertionError(f"span {pending.name!r} mixes clocks: report this as a bug")
        return Span(pending.name, start_us, max(dur_us, 0.0), pending.depth, pending.clock)

"""What crosses from the engine thread to the GUI: plain-Python period views in a locked deque.

The engine thread turns each ``PeriodOutcome`` into a :class:`PeriodView` (numbers, strings and
small dicts only: no tensors, no numpy arrays, nothing that aliases engine memory) and appends it
to a :class:`Feed`; the GUI's timer drains the feed at display rate. The feed is bounded so a GUI
that stalls (a modal dialog on a slow machine) can never make the engine thread grow memory: the
oldest views are dropped and counted instead.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.cadence import replay_totals

if TYPE_CHECKING:
    from engine.duplex import PeriodOutcome  # imports torch: the GUI thread only reads views

__all__ = ["STAGES", "Feed", "PeriodView", "stage_ms"]

# The stages the live panel stacks, in pipeline order; other top-level spans show as themselves.
STAGES = ("backbone", "flow", "vocoder")


def stage_ms(spans: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Milliseconds per stage in one period.

    The named pipeline stages count wherever they nest (a ``synthesis`` span may wrap ``flow``
    and ``vocoder``); when none of them is present the outermost spans are used instead, so a
    loop with other span names still gets a breakdown. Nested spans are never summed twice.
    """
    named: dict[str, float] = {}
    outer: dict[str, float] = {}
    for span in spans:
        name, ms = str(span.get("name", "?")), float(span.get("dur_us", 0.0)) / 1e3
        if name in STAGES:
            named[name] = named.get(name, 0.0) + ms
        if int(span.get("depth", 0)) == 0:
            outer[name] = outer.get(name, 0.0) + ms
    return named if named else outer


@dataclass(frozen=True)
class PeriodView:
    """One period as the GUI sees it; built on the engine thread, read on the GUI thread.

    ``t_s`` is the period's start in session seconds; ``replay`` holds the flat totals of the
    period's replay delta (``hits``, ``misses``, ``misses.<reason>``, ``captures``...);
    ``memory`` is bytes by key (CUDA allocated/reserved/peak or CPU rss/peak); ``arm_switch`` is
    the switch logged in this period (``"SRc -> eager"``) or None; ``barge_in`` says the user
    interrupted the assistant in this period; ``audit`` holds audit mode's running counts;
    ``text`` is what the assistant said (``outcome.text`` where the family has text), ``heard``
    what the user said (``outcome.heard`` where the family runs a recognizer);
    ``response_ms`` and ``dropouts`` are the engine thread's own measures (not the outcome's).
    """

    index: int
    t_s: float
    processing_ms: float
    budget_ms: float
    over_budget: bool
    arm: str
    phase: str
    voice_prob: float
    replay: dict[str, float] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    stages_ms: dict[str, float] = field(default_factory=dict)
    arm_switch: str | None = None
    barge_in: bool = False
    audit: dict[str, Any] | None = None  # audit mode's counts (``loop["audit"]``), None when off
    text: str = ""  # what the assistant said in this period (families with text), else ""
    heard: str = ""  # what the user said, as the family's recognizer heard it, else ""
    response_ms: float | None = None  # end of the user's speech to the assistant's first sound
    dropouts: int = 0  # audio dropouts since the session began (device underruns, overflows)

    @classmethod
    def from_outcome(cls, outcome: PeriodOutcome) -> PeriodView:
        """Copy what the GUI needs out of a period's outcome (engine thread)."""
        record = outcome.record
        switches = [e for e in record.events if e.get("kind") == "arm_switch"]
        return cls(
            index=int(record.index),
            t_s=float(record.start_us) / 1e6,
            processing_ms=float(record.processing_s) * 1e3,
            budget_ms=float(record.period_s) * 1e3,
            over_budget=bool(record.over_budget),
            arm=str(record.arm),
            phase=outcome.phase.value,
            voice_prob=float(outcome.voice_prob),
            replay=dict(replay_totals(record.replay)),
            memory={str(k): int(v) for k, v in record.memory.items()},
            stages_ms=stage_ms(record.spans),
            arm_switch=str(switches[-1].get("detail") or record.arm) if switches else None,
            barge_in=bool(record.loop.get("barge_in", False)),
            audit=_audit_view(record.loop.get("audit")),
            text=outcome.text,
            heard=outcome.heard,
        )


def _audit_view(audit: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The audit figures the GUI shows (scalars only, copied)."""
    if audit is None:
        return None
    keys = ("active", "agreements_total", "divergences_total", "retentions_total")
    view: dict[str, Any] = {k: audit.get(k) for k in keys}
    first = audit.get("first_divergence")
    view["first"] = None if first is None else f"{first.get('region')} at call {first.get('call')}"
    return view


class Feed:
    """A bounded, locked FIFO of :class:`PeriodView` from one producer to one consumer.

    ``push`` never blocks for long (one lock, one append); ``drain`` hands over everything
    queued. ``dropped`` counts views lost because the consumer fell ``maxlen`` behind.
    """

    def __init__(self, maxlen: int = 4096) -> None:
        self._items: deque[PeriodView] = deque()
        self._maxlen = maxlen
        self._lock = threading.Lock()
        self.dropped = 0

    def push(self, view: PeriodView) -> None:
        with self._lock:
            if len(self._items) >= self._maxlen:
                self._items.popleft()
                self.dropped += 1
            self._items.append(view)

    def drain(self) -> list[PeriodView]:
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.dropped = 0

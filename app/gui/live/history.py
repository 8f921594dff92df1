"""The live panel's memory of recent periods, as arrays ready to plot. No Qt.

Keeps the last ``maxlen`` :class:`~app.gui.worker.feed.PeriodView` (one hour at 1 s periods)
plus running totals, and answers the panel's questions: the series over a time window, the
cadence percentiles (``engine.cadence.CadenceStats``), the miss reasons and stages ever seen
(so a legend does not flicker), and where the arm switched.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from app.gui.worker.feed import STAGES, PeriodView
from engine.cadence import CadenceStats
from engine.sizes import MIB

__all__ = ["History"]


class History:
    """The last ``maxlen`` periods; cadence percentiles over the last ``stats_window``."""

    def __init__(self, maxlen: int = 3600, stats_window: int = 300) -> None:
        self._views: deque[PeriodView] = deque(maxlen=maxlen)
        self.stats_window = stats_window
        self.clear()

    def clear(self) -> None:
        """Forget every period (a new session starts from an empty panel)."""
        self._views.clear()
        self.stats = CadenceStats(window=self.stats_window)
        self.miss_reasons: list[str] = []
        self.stages: list[str] = []
        self.memory_keys: list[str] = []
        self.totals: dict[str, float] = {}
        self.arm_switches: list[tuple[float, str]] = []  # (t_s, "SRc -> eager")
        self.responses_ms: list[float] = []  # each answer's response latency, in order

    def __len__(self) -> int:
        return len(self._views)

    @property
    def last(self) -> PeriodView | None:
        return self._views[-1] if self._views else None

    def extend(self, views: Iterable[PeriodView]) -> None:
        for view in views:
            self._views.append(view)
            self.stats.update(
                {
                    "processing_s": view.processing_ms / 1e3,
                    "period_s": view.budget_ms / 1e3,
                    "over_budget": view.over_budget,
                }
            )
            for key, value in view.replay.items():
                self.totals[key] = self.totals.get(key, 0.0) + value
                reason = key.removeprefix("misses.")
                if reason != key and reason not in self.miss_reasons:
                    self.miss_reasons.append(reason)
            for stage in view.stages_ms:
                if stage not in self.stages:
                    self.stages.append(stage)
            self.stages.sort(key=lambda s: (STAGES.index(s) if s in STAGES else len(STAGES), s))
            for key in view.memory:
                if key not in self.memory_keys:
                    self.memory_keys.append(key)
            if view.arm_switch is not None:
                self.arm_switches.append((view.t_s, view.arm_switch))
            if view.response_ms is not None:
                self.responses_ms.append(view.response_ms)

    def window(self, seconds: float) -> list[PeriodView]:
        """The views whose start lies within ``seconds`` of the newest one."""
        if not self._views:
            return []
        newest = self._views[-1].t_s
        out: list[PeriodView] = []
        for view in reversed(self._views):
            if view.t_s < newest - seconds:
                break
            out.append(view)
        out.reverse()
        return out

    @staticmethod
    def times(views: list[PeriodView]) -> np.ndarray:
        return np.array([v.t_s for v in views], dtype=float)

    @staticmethod
    def series(views: list[PeriodView], attr: str) -> np.ndarray:
        return np.array([float(getattr(v, attr)) for v in views], dtype=float)

    @staticmethod
    def replay(views: list[PeriodView], key: str) -> np.ndarray:
        return np.array([float(v.replay.get(key, 0.0)) for v in views], dtype=float)

    @staticmethod
    def stage(views: list[PeriodView], name: str) -> np.ndarray:
        return np.array([float(v.stages_ms.get(name, 0.0)) for v in views], dtype=float)

    @staticmethod
    def memory_mib(views: list[PeriodView], key: str) -> np.ndarray:
        return np.array([v.memory.get(key, 0) / MIB for v in views], dtype=float)

"""The live panel: cadence, replay, captures, memory and stages over the last minutes.

Five linked charts on one time axis (session seconds), each redrawn only when new periods
arrive (about once a second), so the 20 Hz GUI timer costs almost nothing between periods:

    cadence      processing ms per period (red where over budget) against the budget line,
                 with p50/p95 guides
    replay       operator calls per period, stacked: replayed (hits), eager by miss reason
    captures     graphs captured and invalidated per period
    memory       MiB: GPU allocated/reserved/peak, or CPU resident/peak
    stages       ms per period, stacked: backbone, flow, vocoder

Arm switches are dashed vertical lines on every chart, labelled with the new arm.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.gui import theme
from app.gui.live.history import History
from app.gui.live.plots import ArmMarkers, Bars, legend, new_plot, nice_ceiling, nice_range, pen
from app.gui.live.summary import SummaryCard
from app.gui.worker.feed import PeriodView

__all__ = ["LivePanel"]

_BAR_FILL = 0.7  # of a period: bars of neighbouring periods keep a gap between them

_MEMORY_LABELS = {
    "allocated_bytes": "allocated",
    "reserved_bytes": "reserved",
    "peak_bytes": "peak",
    "peak_reserved_bytes": "peak reserved",
    "rss_bytes": "resident",
    "peak_rss_bytes": "peak resident",
}


class LivePanel(QWidget):
    """Charts of the last ``span_s`` seconds; feed it with :meth:`add` (GUI thread)."""

    def __init__(self, span_s: float = 300.0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.span_s = span_s
        self.history = History()
        self.summary = SummaryCard(self.history.stats_window)  # placed by the window; redraw fills
        self.canvas = pg.GraphicsLayoutWidget()
        self.canvas.ci.setSpacing(6)
        self.canvas.ci.setContentsMargins(2, 2, 2, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addWidget(self.canvas, 1)
        self._build_charts()

    # -- construction ------------------------------------------------------------------------

    def _build_charts(self) -> None:
        c = self.canvas.ci
        self.cadence = new_plot(
            c, "Processing time per period vs budget", "ms", row=0, col=0, colspan=2
        )
        self.replay = new_plot(
            c, "Operator calls per period: replayed, or eager by reason", "calls", row=1, col=0
        )
        self.captures = new_plot(c, "Captures and invalidations per period", "graphs", row=1, col=1)
        self.memory = new_plot(c, "Memory", "MiB", row=2, col=0)
        self.stages = new_plot(c, "Stages per period", "ms", row=2, col=1)
        c.layout.setRowStretchFactor(0, 5)
        c.layout.setRowStretchFactor(1, 4)
        c.layout.setRowStretchFactor(2, 4)
        # One time axis for all: ranges are set together in redraw(). (pyqtgraph's setXLink
        # aligns linked views in screen space, which skews plots in different columns.)
        self.plots = [self.cadence, self.replay, self.captures, self.memory, self.stages]
        self._build_cadence()
        for plot in (self.replay, self.captures):  # the middle row shares the bottom row's axis
            plot.getAxis("bottom").setStyle(showValues=False)
            plot.setLabel("bottom", "")
        legend(self.replay, columns=3)
        self.hits = Bars(self.replay, theme.HITS, "replayed")
        self.misses: dict[str, Bars] = {}
        legend(self.captures)
        self.capture_bars = Bars(self.captures, theme.CAPTURES, "captures", width=0.4)
        self.invalid_bars = Bars(self.captures, theme.INVALIDATIONS, "invalidations", width=0.4)
        legend(self.memory, columns=2)
        self.memory_lines: dict[str, pg.PlotDataItem] = {}
        legend(self.stages, columns=3)
        self.stage_bars: dict[str, Bars] = {}
        self.markers = ArmMarkers(self.plots)
        self._switches_drawn = 0

    def _build_cadence(self) -> None:
        """Processing time per period (dots; red when over budget), the budget, p50 and p95."""
        legend(self.cadence, columns=5)
        self.processing = self.cadence.plot(
            pen=pen(theme.PROCESSING),
            name="processing",
            symbol="o",
            symbolSize=4,
            symbolBrush=theme.PROCESSING,
            symbolPen=None,
        )
        self.over = pg.ScatterPlotItem(
            size=7, brush=pg.mkBrush(theme.OVER), pen=None, name="over budget"
        )
        self.cadence.addItem(self.over)
        self.budget = self.cadence.plot(pen=pen(theme.BUDGET, 1.4, dash=True), name="budget")
        self.p50 = self.cadence.plot(pen=pen(theme.TEXT_DIM, 1.0, dash=True), name="p50")
        self.p95 = self.cadence.plot(pen=pen(theme.SPEAK, 1.0, dash=True), name="p95")
        self.cadence.setYRange(0, 1000)

    def _miss_bars(self, reason: str) -> Bars:
        if reason not in self.misses:
            colour = theme.SERIES[len(self.misses) % len(theme.SERIES)]
            self.misses[reason] = Bars(self.replay, colour, f"eager: {reason}")
        return self.misses[reason]

    def _memory_line(self, key: str) -> pg.PlotDataItem:
        if key not in self.memory_lines:
            colour = theme.MEMORY_COLORS[len(self.memory_lines) % len(theme.MEMORY_COLORS)]
            name = _MEMORY_LABELS.get(key, key.removesuffix("_bytes"))
            dash = key.startswith("peak")
            self.memory_lines[key] = self.memory.plot(pen=pen(colour, 1.5, dash=dash), name=name)
        return self.memory_lines[key]

    def _stage_bars(self, name: str) -> Bars:
        if name not in self.stage_bars:
            spare = theme.SERIES[len(self.stage_bars) % len(theme.SERIES)]
            colour = theme.STAGE_COLORS.get(name, spare)
            self.stage_bars[name] = Bars(self.stages, colour, name)
        return self.stage_bars[name]

    # -- updates -----------------------------------------------------------------------------

    def clear(self) -> None:
        """Empty every chart (a new session); nothing to do, and no repaint, when empty."""
        if not len(self.history) and not self.markers.count:
            return
        self.history.clear()
        self.markers.clear()
        self._switches_drawn = 0
        self.redraw()

    def add(self, views: list[PeriodView]) -> None:
        """Append newly arrived periods and redraw (nothing to do for an empty list)."""
        if not views:
            return
        self.history.extend(views)
        self.redraw()

    def redraw(self) -> None:
        views = self.history.window(self.span_s)
        t = History.times(views)
        period = views[-1].budget_ms / 1e3 if views else 1.0
        self._draw_cadence(views, t)
        self._draw_replay(views, t, period)
        self._draw_captures(views, t, period)
        self._draw_memory(views, t)
        self._draw_stages(views, t, period)
        for t_s, detail in self.history.arm_switches[self._switches_drawn :]:
            self.markers.add(t_s, detail)
        self._switches_drawn = len(self.history.arm_switches)
        if views:
            # Grow from a 30 s view to span_s, then scroll, in steps of a thirtieth of the span:
            # early periods stay readable, and the axes repaint every few periods, not each.
            step = self.span_s / 30
            right = max(np.ceil((t[-1] + period) / step) * step, min(self.span_s, 30.0))
            left = max(0.0, right - self.span_s)
            if self.cadence.getViewBox().state["targetRange"][0] != [left, right]:
                for plot in self.plots:
                    plot.setXRange(left, right, padding=0)
        self.summary.refresh(self.history)

    def _draw_cadence(self, views: list[PeriodView], t: np.ndarray) -> None:
        ms = History.series(views, "processing_ms")
        budget = History.series(views, "budget_ms")
        self.processing.setData(t, ms)
        over = np.array([v.over_budget for v in views], dtype=bool)
        self.over.setData(t[over], ms[over])
        self.budget.setData(t, budget)
        stats = self.history.stats.summary()
        for line, key in ((self.p50, "p50_s"), (self.p95, "p95_s")):
            value = stats[key]
            if value is None or not len(views):
                line.setData([], [])
            else:
                line.setData(t[[0, -1]], np.full(2, float(value) * 1e3))
        self._set_y(self.cadence, 0.0, nice_ceiling(1.3 * max([*ms, *budget, 1.0])))

    def _draw_replay(self, views: list[PeriodView], t: np.ndarray, period: float) -> None:
        """Operator calls per period, stacked: replayed, then eager by reason."""
        hits = History.replay(views, "hits")
        self.hits.width = _BAR_FILL * period
        self.hits.set(t, hits)
        misses = {r: History.replay(views, f"misses.{r}") for r in self.history.miss_reasons}
        top = _stack(misses, self._miss_bars, t, period, base=hits)
        self._set_y(self.replay, 0.0, nice_ceiling(1.25 * max(1.0, top.max(initial=0))))

    def _draw_captures(self, views: list[PeriodView], t: np.ndarray, period: float) -> None:
        """Captures and invalidations per period, side by side."""
        captures = History.replay(views, "captures")
        invalidations = History.replay(views, "invalidations")
        half = 0.2 * period
        self.capture_bars.width = self.invalid_bars.width = 2 * half
        self.capture_bars.set(t - half, captures)
        self.invalid_bars.set(t + half, invalidations)
        top = max(1.0, captures.max(initial=0), invalidations.max(initial=0))
        self._set_y(self.captures, 0.0, nice_ceiling(1.25 * top))

    def _draw_memory(self, views: list[PeriodView], t: np.ndarray) -> None:
        low, high = float("inf"), 0.0
        for key in self.history.memory_keys:
            mib = History.memory_mib(views, key)
            self._memory_line(key).setData(t, mib)
            if mib.size:
                low, high = min(low, float(mib.min())), max(high, float(mib.max()))
        if high > 0:
            self._set_y(self.memory, *nice_range(low, high * 1.02))

    def _draw_stages(self, views: list[PeriodView], t: np.ndarray, period: float) -> None:
        stages = {name: History.stage(views, name) for name in self.history.stages}
        top = _stack(stages, self._stage_bars, t, period, base=np.zeros(len(views)))
        self._set_y(self.stages, 0.0, nice_ceiling(1.25 * max(1.0, top.max(initial=0))))

    def _set_y(self, plot: pg.PlotItem, low: float, high: float) -> None:
        """Set a y range only when it changed: an unchanged axis keeps its cached picture.

        A sliver below ``low`` keeps the axis' bottom label (pyqtgraph drops an edge label)."""
        low -= 0.03 * (high - low)
        current = plot.getViewBox().state["targetRange"][1]
        if abs(current[0] - low) > 1e-9 or abs(current[1] - high) > 1e-9:
            plot.setYRange(low, high, padding=0)


def _stack(
    heights: dict[str, np.ndarray],
    bars_for: Callable[[str], Bars],
    t: np.ndarray,
    period: float,
    base: np.ndarray,
) -> np.ndarray:
    """Draw each series' bars on top of the previous ones (from ``base``); returns the top."""
    for name, height in heights.items():
        bars = bars_for(name)
        bars.width = _BAR_FILL * period
        bars.set(t, height, base.copy())
        base = base + height
    return base

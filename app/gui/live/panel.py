"""The live panel: cadence, replay, captures, memory and stages over the last minutes.

Five charts in one column on one linked time axis (session seconds), each redrawn only when new
periods arrive (about once a second), so the 20 Hz GUI timer costs almost nothing between periods:

    cadence      processing ms per period (red where over budget) against the budget line,
                 with p50/p95 guides
    replay       operator calls per period, stacked: replayed (hits), eager by miss reason
    captures     graphs captured and invalidated per period
    memory       MiB: GPU allocated/reserved/peak, or CPU resident/peak
    stages       ms per period, stacked: backbone, flow, vocoder

Arm switches are dashed vertical lines on every chart, labelled with the new arm. Only the
charts that apply to the running model are shown (:meth:`LivePanel.show_for`: a model that
replays nothing has no replay or capture chart), and a new session starts with no series of the
last one's (:meth:`LivePanel.clear`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QLabel, QStackedWidget, QVBoxLayout, QWidget

from app.gui import theme
from app.gui.live.history import History
from app.gui.live.plots import (
    DASHES,
    PATTERNS,
    ArmMarkers,
    Bars,
    legend,
    new_plot,
    nice_ceiling,
    nice_range,
    pen,
    set_title,
)
from app.gui.live.summary import SummaryCard
from app.gui.words import reason_words
from app.gui.worker.feed import PeriodView
from engine.sizes import byte_text

__all__ = ["LivePanel"]

_BAR_FILL = 0.7  # of a period: bars of neighbouring periods keep a gap between them

CHART_TIPS = (
    "How long each period took to compute (dots; red triangles when late) against the budget, "
    "the period's own length (red dashes): below it the voice plays smoothly.",
    "The model's operations in each period: replayed from a recorded graph, or run directly "
    "(and why). On the CPU nothing is launched as a graph: these are the engine's decisions.",
    "Graphs recorded (captured) and thrown away (invalidated) in each period. A healthy GPU "
    "session records at the start, then only replays.",
    "Memory in use: on a GPU allocated, reserved and peak; on the CPU the process's resident "
    "memory. The state rule (S arms) keeps it lower.",
    "Where each period's time goes: the backbone (listening and deciding), the flow (turning "
    "tokens into a spectrogram) and the vocoder (turning that into sound).",
)
CAPTURES_TITLE = "Graphs captured and invalidated"
HOVER_HINT = "Point at a chart to read that period's figures here."


def describe_period(view: PeriodView) -> str:
    """One period's figures in a line, for the hover readout."""
    replay = view.replay
    parts = [
        f"{view.t_s:.1f} s, period {view.index}, arm {view.arm}",
        f"computed in {view.processing_ms:.0f} of {view.budget_ms:.0f} ms",
        f"replayed {replay.get('hits', 0):.0f}, direct {replay.get('misses', 0):.0f}",
        f"graphs captured {replay.get('captures', 0):.0f}, "
        f"invalidated {replay.get('invalidations', 0):.0f}",
    ]
    memory = {_MEMORY_LABELS.get(k, k): v for k, v in view.memory.items()}
    if memory:
        name, value = next(iter(memory.items()))
        parts.append(f"{name} {byte_text(value, 'MiB', 0)}")
    if view.stages_ms:
        parts.append(", ".join(f"{k} {v:.0f} ms" for k, v in view.stages_ms.items()))
    if view.response_ms is not None:
        parts.append(f"answered {view.response_ms:.0f} ms after you stopped")
    return " · ".join(parts)


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
        for part in (self.canvas, self.canvas.viewport()):  # Tab skips the charts' canvas
            part.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.canvas.setAccessibleName("live charts")
        self.canvas.setAccessibleDescription(
            "Per period: processing time against the budget, operator calls replayed or run "
            "eagerly, graphs captured, memory, and time per stage."
        )
        self.canvas.ci.setSpacing(6)
        self.canvas.ci.setContentsMargins(2, 2, 2, 2)
        # Before the first period the charts would be empty 0-1 axes: a sentence instead.
        self.placeholder = QLabel(
            "The charts appear here once a conversation runs: press Start (F5).\n"
            "They show, period by period, how long the engine took against the budget, what it "
            "replayed, the graphs it recorded, memory, and where the time went."
        )
        self.placeholder.setObjectName("hint")
        self.placeholder.setWordWrap(True)
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.placeholder)
        self.stack.addWidget(self.canvas)
        self.readout = QLabel(HOVER_HINT)
        self.readout.setObjectName("hint")
        self.readout.setWordWrap(True)
        self.readout.setAccessibleName("chart readout")
        self.readout.setToolTip("The figures of the period under the mouse, on every chart.")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.stack, 1)
        layout.addWidget(self.readout)
        self._build_charts()
        self.hover_lines = []
        for plot in self.plots:
            line = pg.InfiniteLine(angle=90, pen=pen(theme.TEXT, 1.0, Qt.PenStyle.DotLine))
            line.hide()
            plot.addItem(line, ignoreBounds=True)
            self.hover_lines.append(line)
        self.canvas.scene().sigMouseMoved.connect(self._hover)

    # -- construction ------------------------------------------------------------------------

    def _build_charts(self) -> None:
        c = self.canvas.ci
        self.cadence = new_plot(c, "Processing time per period vs budget", "ms", row=0, col=0)
        self.replay = new_plot(
            c,
            "Operator calls per period: replayed, or run directly (and why)",
            "calls",
            row=1,
            col=0,
        )
        self.captures = new_plot(c, CAPTURES_TITLE, "graphs", row=2, col=0)
        self.memory = new_plot(c, "Memory", "MiB", row=3, col=0)
        self.stages = new_plot(c, "Time per stage per period", "ms", row=4, col=0)
        # One column, one time axis: the same moment (an arm switch) at the same x on every
        # chart. The axes share their left width (new_plot), and redraw sets one x range on all.
        self.all_plots = [self.cadence, self.replay, self.captures, self.memory, self.stages]
        self.plots = list(self.all_plots)  # the charts shown (show_for)
        self._stretch = dict(zip(map(id, self.all_plots), (5, 4, 3, 3, 4), strict=True))
        for plot, tip in zip(self.all_plots, CHART_TIPS, strict=True):
            plot.setToolTip(tip)
        self._build_cadence()
        self._label_time_axis()
        legend(self.replay, columns=3)
        self.hits = Bars(self.replay, theme.HITS, "replayed")
        self.misses: dict[str, Bars] = {}
        legend(self.captures)
        self.capture_bars = Bars(self.captures, theme.CAPTURES, "captures", width=0.4)
        self.invalid_bars = Bars(
            self.captures, theme.INVALIDATIONS, "invalidations", 0.4, PATTERNS[1]
        )
        legend(self.memory, columns=2)
        self.memory_lines: dict[str, pg.PlotDataItem] = {}
        legend(self.stages, columns=3)
        self.stage_bars: dict[str, Bars] = {}
        self.markers = ArmMarkers(self.plots)
        self._switches_drawn = 0

    def _label_time_axis(self) -> None:
        """Only the bottom chart shown labels the shared time axis."""
        for plot in self.all_plots:
            bottom = plot is self.plots[-1]
            plot.getAxis("bottom").setStyle(showValues=bottom)
            plot.setLabel("bottom", "session time (s)" if bottom else "", color=theme.TEXT_DIM,
                          **{"font-size": "7.5pt"})  # fmt: skip

    def show_for(self, replays: bool, timed: bool) -> None:
        """Show only the charts that apply: replay and captures when the model has a replay
        engine (``replays``), stages when its periods time stages (``timed``)."""
        shown = [self.cadence]
        shown += [self.replay, self.captures] if replays else []
        shown += [self.memory] + ([self.stages] if timed else [])
        if shown == self.plots:
            return
        layout = self.canvas.ci
        for plot in self.plots:
            layout.removeItem(plot)
        for row in range(len(self.all_plots)):
            layout.layout.setRowStretchFactor(row, 0)
        for row, plot in enumerate(shown):
            layout.addItem(plot, row=row, col=0)
            layout.layout.setRowStretchFactor(row, self._stretch[id(plot)])
        self.plots = shown
        self.markers.plots = shown
        self._label_time_axis()

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
        self.over = self.cadence.plot(
            pen=None, name="over budget", symbol="t", symbolSize=9,
            symbolBrush=theme.OVER, symbolPen=None,
        )  # fmt: skip
        self.budget = self.cadence.plot(pen=pen(theme.BUDGET, 1.4, dash=True), name="budget")
        self.p50 = self.cadence.plot(
            pen=pen(theme.TEXT_DIM, 1.0, Qt.PenStyle.DotLine), name="median"
        )
        self.p95 = self.cadence.plot(pen=pen(theme.SPEAK, 1.0, Qt.PenStyle.DashDotLine), name="p95")
        # Log time: a 20 ms period and the 1000 ms budget both readable on one chart.
        self.cadence.setLogMode(y=True)
        self.cadence.setYRange(0, 3)

    def _miss_bars(self, reason: str) -> Bars:
        if reason not in self.misses:
            colour = theme.SERIES[len(self.misses) % len(theme.SERIES)]
            pattern = PATTERNS[(len(self.misses) + 1) % len(PATTERNS)]  # solid is "replayed"
            name = f"direct: {reason_words(reason)}"
            self.misses[reason] = Bars(self.replay, colour, name, pattern=pattern)
        return self.misses[reason]

    def _memory_line(self, key: str) -> pg.PlotDataItem:
        if key not in self.memory_lines:
            colour = theme.MEMORY_COLORS[len(self.memory_lines) % len(theme.MEMORY_COLORS)]
            name = _MEMORY_LABELS.get(key, key.removesuffix("_bytes"))
            dash = DASHES[len(self.memory_lines) % len(DASHES)]
            self.memory_lines[key] = self.memory.plot(pen=pen(colour, 1.5, dash), name=name)
        return self.memory_lines[key]

    def _stage_bars(self, name: str) -> Bars:
        if name not in self.stage_bars:
            spare = theme.SERIES[len(self.stage_bars) % len(theme.SERIES)]
            colour = theme.STAGE_COLORS.get(name, spare)
            pattern = PATTERNS[len(self.stage_bars) % len(PATTERNS)]
            self.stage_bars[name] = Bars(self.stages, colour, name, pattern=pattern)
        return self.stage_bars[name]

    # -- hover -------------------------------------------------------------------------------

    def _hover(self, pos: QPointF) -> None:
        for plot in self.plots:
            if plot.sceneBoundingRect().contains(pos):
                self.read_at(float(plot.getViewBox().mapSceneToView(pos).x()))
                return

    def read_at(self, t_s: float) -> str:
        """Show the figures of the period nearest ``t_s`` (session seconds) under the charts,
        and a dotted line through it on every chart; returns the text ("" when none)."""
        views = self.history.window(self.span_s)
        if not views:
            return ""
        view = min(views, key=lambda v: abs(v.t_s - t_s))
        for line in self.hover_lines:
            line.setPos(view.t_s)
            line.show()
        self.readout.setText(describe_period(view))
        return self.readout.text()

    def set_device(self, accelerator: str) -> None:
        """Say on the capture chart, on the CPU, that no graph is launched there."""
        title = CAPTURES_TITLE
        if accelerator == "CPU":
            title += " (on the CPU none is launched: the counts are the engine's decisions)"
        set_title(self.captures, title)

    # -- updates -----------------------------------------------------------------------------

    def clear(self) -> None:
        """Empty every chart (a new session); nothing to do, and no repaint, when empty."""
        if not len(self.history) and not self.markers.count:
            return
        self.history.clear()
        self.markers.clear()
        self._forget_series()
        for line in self.hover_lines:
            line.hide()
        self.readout.setText(HOVER_HINT)
        self.stack.setCurrentWidget(self.placeholder)
        self._switches_drawn = 0
        self.redraw()

    def _forget_series(self) -> None:
        """Remove the series the last session brought (miss reasons, memory keys, stages), so
        a new session's legends list only its own."""
        for bars in self.misses.values():
            bars.remove(self.replay)
        for bars in self.stage_bars.values():
            bars.remove(self.stages)
        for line in self.memory_lines.values():
            self.memory.removeItem(line)
        self.misses.clear()
        self.stage_bars.clear()
        self.memory_lines.clear()
        for plot in (self.memory, self.replay, self.stages):
            if plot.legend is not None:
                plot.legend.setVisible(bool(plot.legend.items))

    def add(self, views: list[PeriodView]) -> None:
        """Append newly arrived periods and redraw (nothing to do for an empty list)."""
        if not views:
            return
        self.history.extend(views)
        self.stack.setCurrentWidget(self.canvas)
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
            for plot in self.plots:
                if plot.getViewBox().state["targetRange"][0] != [left, right]:
                    plot.setXRange(left, right, padding=0)
        self.summary.refresh(self.history)

    def _draw_cadence(self, views: list[PeriodView], t: np.ndarray) -> None:
        ms = History.series(views, "processing_ms")
        budget = History.series(views, "budget_ms")
        shown = np.maximum(ms, 0.1)  # log axis: a 0 ms period shows at 0.1 ms
        self.processing.setData(t, shown)
        over = np.array([v.over_budget for v in views], dtype=bool)
        self.over.setData(t[over], shown[over])
        self.budget.setData(t, budget)
        stats = self.history.stats.summary()
        for line, key in ((self.p50, "p50_s"), (self.p95, "p95_s")):
            value = stats[key]
            if value is None or not len(views):
                line.setData([], [])
            else:
                line.setData(t[[0, -1]], np.full(2, float(value) * 1e3))
        # Decades, snapped to fifths so the axis rarely moves: the data and the budget in view.
        low = np.log10(max(0.1, 0.7 * float(shown.min(initial=1e9)) if len(views) else 1.0))
        high = np.log10(3.0 * max([*ms, *budget, 1.0]))  # room above the budget for the legend
        self._set_y(self.cadence, np.floor(low * 5) / 5, np.ceil(high * 5) / 5)

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

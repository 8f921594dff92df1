"""Small pyqtgraph helpers shared by the live panel's charts: styling, bars, arm markers."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QGraphicsItem

from app.gui import theme

__all__ = [
    "DASHES",
    "PATTERNS",
    "ArmMarkers",
    "Bars",
    "legend",
    "new_plot",
    "nice_ceiling",
    "nice_range",
    "pen",
    "set_title",
]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k at or above ``value`` (> 0):
    axis tops that move rarely, so the charts do not rescale (and repaint their axes) every
    period, yet waste at most a fifth of the height."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** np.floor(np.log10(value))
    for step in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if step * scale >= value * (1 - 1e-9):
            return float(step * scale)
    return float(10 * scale)


def nice_range(low: float, high: float) -> tuple[float, float]:
    """A range around [low, high] snapped to a step a tenth of a nice span (at least 1)."""
    step = max(1.0, nice_ceiling(max(high - low, 1.0)) / 5)
    return float(np.floor(low / step) * step), float(np.ceil(high / step) * step + step / 2)


def pen(colour: str, width: float = 1.6, dash: bool | Qt.PenStyle = False) -> pg.QtGui.QPen:
    """A cosmetic pen; ``dash`` True for dashes, or any Qt pen style (dots, dash-dots...)."""
    p = pg.mkPen(colour, width=width)
    if dash is True:
        p.setStyle(Qt.PenStyle.DashLine)
    elif dash:
        p.setStyle(dash)
    p.setCosmetic(True)
    return p


# Fills for bar series besides their hue, in order: a series reads without colour vision.
PATTERNS = (
    Qt.BrushStyle.SolidPattern,
    Qt.BrushStyle.BDiagPattern,
    Qt.BrushStyle.Dense4Pattern,
    Qt.BrushStyle.CrossPattern,
    Qt.BrushStyle.FDiagPattern,
    Qt.BrushStyle.HorPattern,
    Qt.BrushStyle.DiagCrossPattern,
)
# Line styles for line series besides their hue, in order.
DASHES = (
    Qt.PenStyle.SolidLine,
    Qt.PenStyle.DashLine,
    Qt.PenStyle.DotLine,
    Qt.PenStyle.DashDotLine,
)


def set_title(plot: pg.PlotItem, title: str) -> None:
    """A chart's small title."""
    plot.setTitle(f"<span style='color:{theme.TEXT}; font-size:9pt'>{title}</span>")


def new_plot(layout: pg.GraphicsLayout, title: str, units: str, **where: int) -> pg.PlotItem:
    """A plot with a small title, a light grid, no mouse zoom (the panel scrolls itself)."""
    plot: pg.PlotItem = layout.addPlot(**where)
    set_title(plot, title)
    plot.showGrid(x=True, y=True, alpha=0.12)
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.disableAutoRange()  # the panel sets ranges itself; autorange re-measures every paint
    plot.hideButtons()
    font = QFont()
    font.setPointSizeF(7.5)
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        # Axes repaint only when their range changes (nice_range keeps that rare): cached, the
        # rest of the chart's updates blit them instead of replaying their text.
        axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        axis.setTickFont(font)
        axis.setPen(pg.mkPen(theme.PANEL_BORDER))
        axis.setTextPen(pg.mkPen(theme.TEXT_DIM))
    plot.getAxis("left").setWidth(48)
    for name in ("left", "bottom"):  # our units are fixed (ms, MiB, s): no "(x0.001)" rescaling
        plot.getAxis(name).enableAutoSIPrefix(False)
    plot.setLabel("left", units, color=theme.TEXT_DIM, **{"font-size": "7.5pt"})
    plot.setLabel("bottom", "session time (s)", color=theme.TEXT_DIM, **{"font-size": "7.5pt"})
    return plot


def legend(plot: pg.PlotItem, columns: int = 5) -> pg.LegendItem:
    """A legend laid out in one row (up to ``columns`` entries) in the plot's top-left corner,
    so it covers a strip of the chart rather than a block of its data."""
    item = plot.addLegend(
        offset=(4, 2), labelTextColor=theme.TEXT_DIM, labelTextSize="7.5pt", colCount=columns
    )
    item.setBrush(pg.mkBrush(QColor(23, 25, 29, 190)))
    item.layout.setHorizontalSpacing(10)
    item.layout.setVerticalSpacing(0)
    return item


class Bars:
    """A bar series that can stack on a baseline; updating replaces x and heights in place.

    ``pattern`` fills the bars besides their colour. A series with no non-zero height in view
    is hidden and leaves the legend, so an idle chart does not list what it does not show."""

    def __init__(
        self,
        plot: pg.PlotItem,
        colour: str,
        name: str,
        width: float = 0.7,
        pattern: Qt.BrushStyle = Qt.BrushStyle.SolidPattern,
    ) -> None:
        self.width = width
        self.name = name
        self._legend: pg.LegendItem | None = plot.legend
        brush = QBrush(QColor(colour), pattern)
        self.item = pg.BarGraphItem(
            x=[], height=[], width=width, brush=brush, pen=pg.mkPen(None), name=name
        )
        plot.addItem(self.item)
        self._show(False)

    def set(self, x: np.ndarray, height: np.ndarray, base: np.ndarray | None = None) -> None:
        y0 = base if base is not None else np.zeros_like(height)
        self.item.setOpts(x=x, height=height, y0=y0, width=self.width)
        self._show(bool(np.any(height)))

    def remove(self, plot: pg.PlotItem) -> None:
        """Take the series off ``plot`` and its legend (a new session starts without it)."""
        plot.removeItem(self.item)  # the plot's legend forgets it too
        if self._legend is not None:
            self._legend.setVisible(bool(self._legend.items))

    def _show(self, visible: bool) -> None:
        if visible == self.item.isVisible():
            return
        self.item.setVisible(visible)
        if self._legend is not None:
            if visible:
                self._legend.addItem(self.item, self.name)
            else:
                self._legend.removeItem(self.item)
            self._legend.setVisible(bool(self._legend.items))  # no empty legend box


class ArmMarkers:
    """Vertical dashed lines where the arm switched, on every chart; labelled on the first."""

    def __init__(self, plots: list[pg.PlotItem]) -> None:
        self.plots = plots
        self._lines: list[tuple[pg.PlotItem, pg.InfiniteLine]] = []
        self.count = 0

    def add(self, t_s: float, detail: str) -> None:
        """Mark the switch ``detail`` (``"SRc -> eager"``) at ``t_s`` session seconds."""
        arm = detail.split("->")[-1].strip()
        label_opts = {
            "color": theme.ARM_SWITCH,
            "position": 0.74,  # below the legend strip that tops every chart
            "fill": pg.mkBrush(QColor(23, 25, 29, 200)),
        }
        for i, plot in enumerate(self.plots):
            line = pg.InfiniteLine(
                pos=t_s,
                angle=90,
                pen=pen(theme.ARM_SWITCH, 1.2, dash=True),
                label=f"arm {arm}" if i == 0 else None,
                labelOpts=label_opts if i == 0 else None,
            )
            line.setToolTip(f"arm switch {detail} at {t_s:.1f} s")
            plot.addItem(line, ignoreBounds=True)
            self._lines.append((plot, line))
        self.count += 1

    def clear(self) -> None:
        for plot, line in self._lines:
            plot.removeItem(line)
        self._lines.clear()
        self.count = 0

"""Charts that read: the budget and the data both in view, one time axis for all, a hover
readout, shapes and fills besides hue, nothing drawn for an empty series or before a session."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from pytestqt.qtbot import QtBot

from app.gui.live.panel import LivePanel
from app.gui.worker.feed import PeriodView

pytestmark = pytest.mark.gui


def _views(n: int, switch_at: int = 6, captures_at: int | None = None) -> list[PeriodView]:
    views = []
    for i in range(n):
        replay = {"hits": 4.0, "misses": 2.0, "misses.warmup": 2.0}
        replay["captures"] = 1.0 if i == captures_at else 0.0
        arm = "eager" if i >= switch_at else "SRc"
        view = PeriodView(i, float(i), 20.0 + 3 * (i % 5), 1000.0, False, arm, "listen", 0.0)
        views.append(
            dataclasses.replace(
                view,
                replay=replay,
                memory={"rss_bytes": (500 + i) * 2**20},
                stages_ms={"backbone": 5.0, "flow": 10.0, "vocoder": 5.0},
                arm_switch="SRc -> eager" if i == switch_at else None,
            )
        )
    return views


@pytest.fixture
def panel(gui_app: object, qtbot: QtBot) -> LivePanel:
    panel = LivePanel()
    qtbot.addWidget(panel)
    panel.resize(900, 900)
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_a_sentence_instead_of_empty_axes_until_the_first_period(
    panel: LivePanel, qtbot: QtBot
) -> None:
    assert panel.stack.currentWidget() is panel.placeholder
    assert "Start (F5)" in panel.placeholder.text()
    panel.add(_views(3))
    assert panel.stack.currentWidget() is panel.canvas
    panel.clear()
    assert panel.stack.currentWidget() is panel.placeholder


def test_the_budget_and_the_data_are_both_in_view(panel: LivePanel) -> None:
    panel.add(_views(12))
    low, high = panel.cadence.getViewBox().state["targetRange"][1]  # log10 of ms
    assert low < np.log10(20.0) and np.log10(1000.0) < high  # data and budget in view
    assert high - low < 3.0  # and not a waste of decades: 20 ms sits well off the floor
    assert (np.log10(20.0) - low) / (high - low) > 0.05


def test_one_time_axis_puts_an_arm_switch_at_the_same_x_on_every_chart(
    panel: LivePanel, qtbot: QtBot
) -> None:
    panel.add(_views(12))
    qtbot.wait(50)
    xs = [plot.getViewBox().mapViewToScene(QPointF(6.0, 0.0)).x() for plot in panel.plots]
    assert max(xs) - min(xs) < 1.0, xs
    assert panel.markers.count == 1


def test_hovering_reads_out_the_period_under_the_mouse(panel: LivePanel, qtbot: QtBot) -> None:
    panel.add(_views(12))
    qtbot.wait(50)
    text = panel.read_at(5.2)
    assert "period 5" in text and "computed in" in text and "arm SRc" in text
    assert all(line.isVisible() and line.value() == 5.0 for line in panel.hover_lines)
    vb = panel.memory.getViewBox()
    panel.canvas.scene().sigMouseMoved.emit(vb.mapViewToScene(QPointF(9.0, 505.0)))
    assert "period 9" in panel.readout.text() and "arm eager" in panel.readout.text()


def test_series_differ_by_shape_and_an_empty_one_is_not_drawn(panel: LivePanel) -> None:
    panel.add(_views(8))
    assert panel.over.opts["symbol"] == "t" and panel.processing.opts["symbol"] == "o"
    styles = {p.opts["pen"].style() for p in (panel.budget, panel.p50, panel.p95)}
    assert len(styles) == 3  # dashes, dots, dash-dots: not hue alone
    fills = {bars.item.opts["brush"].style() for bars in panel.stage_bars.values()}
    assert len(fills) == 3
    assert fills >= {Qt.BrushStyle.SolidPattern}
    # No capture yet: the series is hidden and out of the legend.
    assert not panel.capture_bars.item.isVisible()
    names = [label.text for _, label in panel.captures.legend.items]
    assert "captures" not in names
    panel.add(_views(12, captures_at=9)[8:])
    assert panel.capture_bars.item.isVisible()
    assert "captures" in [label.text for _, label in panel.captures.legend.items]

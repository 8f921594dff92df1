"""The window fits any screen: bounded by the free area, reflowed and scrolled when narrow, at
100, 150 and 200% scaling (each scaling in a process of its own: Qt reads it at start-up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui

ROOT = Path(__file__).resolve().parents[2]


def _charts_inside(window: MainWindow) -> bool:
    """Every chart lies wholly inside the canvas: none is cut on the right or the bottom."""
    canvas = window.panel.canvas
    view = canvas.viewport().rect()
    for plot in window.panel.plots:
        box = canvas.mapFromScene(plot.sceneBoundingRect()).boundingRect()
        if box.right() > view.right() + 1 or box.bottom() > view.bottom() + 1 or box.width() < 200:
            return False
    return True


def test_narrow_windows_stack_the_main_view_under_the_cards_and_scroll(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    from PySide6.QtCore import Qt

    window = make_window()
    free = window.screen().availableGeometry()
    assert window.width() <= free.width() and window.height() <= free.height()
    window.resize(700, 560)
    qtbot.wait(50)
    assert window.splitter.orientation() is Qt.Orientation.Vertical
    assert window.transcript.width() >= 600 and window.transcript.height() >= 500
    window.show_charts()  # the charts, a tab away (Ctrl+2)
    qtbot.wait(50)
    assert window.panel.width() >= 600  # the charts get the window's width
    assert window.panel.height() >= 500  # ... and a readable height: the page scrolls
    assert window.scroll_area.verticalScrollBar().maximum() > 0
    assert _charts_inside(window)
    window.resize(780, 700)  # still narrow on the 800 px offscreen screen
    window.resize(1280, 760)  # wider than the screen: the window manager would bound it
    qtbot.wait(50)


def test_a_saved_size_larger_than_the_screen_is_bounded(
    make_window: Callable[..., MainWindow], settings_file: Path
) -> None:
    from PySide6.QtCore import QSettings

    store = QSettings(str(settings_file.with_name("window.ini")), QSettings.Format.IniFormat)
    first = make_window()
    first.setGeometry(0, 0, 2400, 1600)  # as if saved on a large monitor
    store.setValue("geometry", first.saveGeometry())
    store.sync()
    first.hide()
    second = make_window()
    free = second.screen().availableGeometry()
    assert second.width() <= free.width() and second.height() <= free.height()


_PROBE = """
import json, sys
from pathlib import Path
from app.gui.launch import create_application
app = create_application([])
from app.gui.window.main_window import MainWindow
from app.gui.worker.routes import AudioRoute
window = MainWindow(settings_file=Path(sys.argv[1]), route=AudioRoute(output="none"),
                    sessions_dir=Path(sys.argv[2]))
window.show()
app.processEvents()
free = window.screen().availableGeometry()
print(json.dumps({"w": window.width(), "h": window.height(), "free_w": free.width(),
                  "free_h": free.height(), "scale": window.devicePixelRatioF(),
                  "scroll": window.scroll_area.verticalScrollBar().maximum()}))
window.close()
"""


@pytest.mark.parametrize("scale", ["1", "1.5", "2"])
def test_the_window_fits_the_screen_at_each_scaling(scale: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "QT_SCALE_FACTOR": scale,
        "PYTHONPATH": str(ROOT),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path / "settings.yaml"), str(tmp_path / "s")],
        env=env, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown["scale"] == pytest.approx(float(scale))
    assert shown["w"] <= shown["free_w"] and shown["h"] <= shown["free_h"], shown

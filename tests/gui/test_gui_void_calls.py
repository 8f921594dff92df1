"""PySide6 6.12.0 on CPython 3.11 leaked a reference to None on every call of a Qt method that
returns nothing, and the interpreter aborted after about 5,200 of them (FACTS.md). The app makes
such calls at 20 Hz all day; this test makes 20,000 in one process and checks None's count."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.gui

CALLS = 20_000


def test_twenty_thousand_void_qt_calls_do_not_leak_none(gui_app: object) -> None:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QLabel, QProgressBar

    from app.gui.meters.level_meter import LevelMeter

    label, bar, timer, meter = QLabel(), QProgressBar(), QTimer(), LevelMeter("test")
    calls = (
        lambda i: label.setText(str(i % 97)),
        lambda i: label.setToolTip("tip" if i % 2 else ""),
        lambda i: bar.setValue(i % 100),
        lambda i: timer.setInterval(10 + i % 7),
        lambda i: meter.update(),  # what the meters do on every tick
    )
    before = sys.getrefcount(None)
    for i in range(CALLS):
        result = calls[i % len(calls)](i)
        assert result is None
    leaked = sys.getrefcount(None) - before
    # A leak per call would be ~20,000; allow for None references the interpreter makes anyway.
    assert leaked < 1_000, f"{leaked} references to None leaked over {CALLS} void Qt calls"

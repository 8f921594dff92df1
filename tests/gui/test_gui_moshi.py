"""Moshi in the window: the small model on the CPU in real time, 80-ms periods, its stages and
its text (numbers with random weights: the transcript says so instead of showing them), through
the same session code path as the 7B."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

from app.settings import save_settings
from engine.arms import Arm
from engine.trace import read_trace
from tests.gui.conftest import SESSION_MS, small_cpu_settings

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def test_moshi_converses_in_the_window(
    make_window: Callable[..., MainWindow], qtbot: QtBot, settings_file: Path
) -> None:
    save_settings(small_cpu_settings(family="moshi"), settings_file)
    window = make_window(realtime=True)
    with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS) as ready:
        window.start_conversation()
    assert ready.args[0].weights_synthetic and ready.args[0].device == "cpu"
    assert window.session_card.value("model") == "Moshi (small, seeded random weights)"

    periods = lambda: len(window.panel.history)  # noqa: E731
    qtbot.waitUntil(lambda: periods() >= 12, timeout=SESSION_MS)
    window.switch_arm(Arm.SR)
    switched = periods()
    qtbot.waitUntil(lambda: periods() >= switched + 12, timeout=SESSION_MS)
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
        window.stop_conversation()
    assert window.error_strip.text() == ""

    views = window.panel.history.window(1e9)
    assert {v.budget_ms for v in views} == {80.0}  # the live panel's budget follows the period
    assert {"SRc", "SR"} <= {v.arm for v in views}
    assert {"frame", "encode", "lm", "decode"} <= set(window.panel.history.stages)
    assert window.controller.trace is not None
    header, records = read_trace(window.controller.trace)
    assert header["period_s"] == 0.08 and header["settings"]["family"] == "moshi"
    # The trace keeps the text tokens (numbers: random weights have no vocabulary) ...
    assert sum(bool(r["loop"].get("text")) for r in records) > len(records) // 2
    # ... the transcript does not: it says plainly that random weights speak no words.
    assert window.transcript.text() == ""
    assert "Random weights speak no words" in window.transcript.view.placeholderText()
    # Honest numbers: a period is counted over budget exactly when its frame took longer than
    # the period, and the window says so as it happens.
    assert all(r["over_budget"] == (r["processing_s"] > r["period_s"]) for r in records)
    # How fast the frames are is a speed figure for bench/, not this test's: with the window
    # painting in the same process a fresh 2-core machine gave a median frame of 72-90 ms.
    assert all(r["processing_s"] > 0 for r in records)

"""Issue 21's window: the conversation at the centre, charts that follow the family, a model
kept loaded across Stop/Start, status that follows the family, and no window, no process.

The small CPU Token2Wav (``synthetic``) and espeak-ng speech, as the other window tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from app.gui.worker.feed import PeriodView
from app.gui.worker.worker import SessionInfo
from app.settings import save_settings
from tests.gui.conftest import SESSION_MS, small_cpu_settings

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def _view(index: int, **changes: object) -> PeriodView:
    base = PeriodView(
        index=index, t_s=float(index), processing_ms=40.0, budget_ms=1000.0, over_budget=False,
        arm="SRc", phase="listen", voice_prob=0.0,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_conversation_is_the_main_view(make_window: Callable[..., MainWindow]) -> None:
    window = make_window()
    window.resize(1280, 760)
    assert window.view.tabs.currentWidget() is window.transcript
    assert window.transcript.height() > 0.6 * window.height()  # full height, not a 7-line box
    assert window.transcript.view.isReadOnly()
    window.show_charts()
    assert window.view.tabs.currentWidget() is window.panel
    window.show_conversation()
    assert window.view.tabs.currentWidget() is window.transcript


def test_the_transcript_appends_keeps_a_selection_and_copies(
    make_window: Callable[..., MainWindow],
) -> None:
    from PySide6.QtGui import QGuiApplication

    window = make_window()
    shown = window.transcript
    shown.add_period(0.0, "hello there", "")
    cursor = shown.view.textCursor()
    cursor.setPosition(1)
    cursor.setPosition(6, cursor.MoveMode.KeepAnchor)
    shown.view.setTextCursor(cursor)
    shown.add_period(1.0, "", " Hi.")  # a line arrives while the user selects
    shown.add_period(2.0, "", " How can I help?")  # the same line grows
    assert shown.view.textCursor().selectedText() == "00:00"
    assert shown.text() == shown.transcript.text()
    assert shown.text().splitlines()[-1].endswith("Assistant: Hi. How can I help?")
    shown.copy_all()
    assert QGuiApplication.clipboard().text() == shown.transcript.text()


def test_charts_show_what_applies_and_a_session_starts_without_the_last_ones_series(
    make_window: Callable[..., MainWindow],
) -> None:
    window = make_window()
    panel = window.panel
    moshi_like = [
        _view(i, replay={"hits": 5.0, "misses": 1.0, "misses.warmup": 1.0},
              memory={"rss_bytes": 2**28}, stages_ms={"lm": 20.0, "decode": 5.0})
        for i in range(3)
    ]  # fmt: skip
    panel.add(moshi_like)
    assert panel.stages.legend.isVisible() and panel.replay.legend.isVisible()
    assert set(panel.stage_bars) == {"lm", "decode"} and set(panel.misses) == {"warmup"}
    panel.show_for(replays=False, timed=True)  # a model that replays nothing (the basic voice)
    assert panel.plots == [panel.cadence, panel.memory, panel.stages]
    assert panel.replay.scene() is None and panel.captures.scene() is None  # not drawn at all
    panel.clear()
    assert not panel.stage_bars and not panel.misses and not panel.memory_lines
    assert not panel.stages.legend.items and not panel.memory.legend.items
    panel.add([_view(i, memory={"rss_bytes": 2**27}, stages_ms={"vad": 1.0}) for i in range(2)])
    names = [label.text for _, label in panel.stages.legend.items]
    assert names == ["vad"]  # only this session's stage: no "lm" left from the last one
    panel.show_for(replays=True, timed=True)
    assert panel.plots == panel.all_plots and panel.replay.scene() is panel.canvas.scene()


def test_a_model_stays_loaded_across_stop_and_start_and_speaks_the_same(
    make_window: Callable[..., MainWindow], qtbot: QtBot, settings_file: Path
) -> None:
    window = make_window()

    said: list[str] = []

    def converse(periods: int) -> tuple[SessionInfo, np.ndarray]:
        with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS) as ready:
            window.start_conversation()
        said.append(window.status_text.text())
        this_session = lambda: not window.display.clear_charts  # noqa: E731 (its first drawn)
        qtbot.waitUntil(
            lambda: this_session() and len(window.panel.history) >= periods, timeout=SESSION_MS
        )
        with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
            window.stop_conversation()
        recorder = window.controller.recorder
        assert recorder is not None
        return ready.args[0], recorder.snapshot()[1].samples

    first, voice_1 = converse(6)
    assert first.reused_s is None  # loaded
    again, voice_2 = converse(6)
    assert again.reused_s == pytest.approx(first.reused_s or again.reused_s)
    assert again.reused_s is not None and again.reused_s > 0
    assert "stayed loaded" in said[1] and "stayed loaded" not in said[0]
    # Reset in place, the kept model's new conversation is the fresh one, bit for bit.
    n = min(len(voice_1), len(voice_2))
    assert n >= 6 * 24000 and np.abs(voice_1[:n]).max() > 0
    assert np.array_equal(voice_1[:n], voice_2[:n])
    # Another setting the model depends on: it is loaded again (and the old one closed).
    window._apply_settings(dataclasses.replace(window.settings, seed=1))
    third, _ = converse(2)
    assert third.reused_s is None
    window.controller.shutdown(timeout_s=30)
    assert window.controller.kept is None  # unloaded with the window


def test_status_and_toolbar_follow_a_family_without_arms(
    make_window: Callable[..., MainWindow], settings_file: Path
) -> None:
    from app.gui.words import NO_ARMS

    save_settings(small_cpu_settings(family="basic"), settings_file)
    window = make_window()
    assert not window.toolbar.arm.isEnabled()
    assert window.session_card.value("arm") == NO_ARMS
    info = SessionInfo(
        model_name="Basic voice", device="cpu", accelerator="CPU", weights_synthetic=False,
        output_trim_db=0.0, arm="SRc", period_s=0.2, input_rate=16000, output_rate=22050,
        input_label="talk.wav", output_label="recorded only", trace=None, switchable_arms=(),
        replays=False, has_text=True, says_words=True, stages=("vad",),
    )  # fmt: skip
    window.display.on_ready(info)
    assert "switch the arm" not in window.status_text.text()
    assert window.panel.plots == [window.panel.cadence, window.panel.memory, window.panel.stages]


def test_load_progress_moves_between_the_familys_reports(
    gui_app: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PySide6.QtWidgets import QLabel, QProgressBar

    from app.gui.window import load_progress

    now = [100.0]
    monkeypatch.setattr(load_progress.time, "monotonic", lambda: now[0])
    bar, status = QProgressBar(), QLabel()
    shown = load_progress.LoadProgress(bar, status)
    shown.begin(expected_s=30.0)  # the last load of this model took 30 s
    shown.report("loading", 0.2)
    values = []
    for _ in range(4):  # no report for 12 s (the basic voice's reply model loading)
        now[0] += 3.0
        shown.tick()
        values.append(bar.value())
    assert values == sorted(values) and values[-1] > values[0] >= 20
    assert status.text().endswith("12 s of about 30 s")
    now[0] += 100.0  # slower than last time: it never claims to be done before it is
    shown.tick()
    assert bar.value() == 99
    assert shown.end() == pytest.approx(112.0) and bar.isHidden()
    shown.begin(expected_s=None)  # never loaded here: the seconds still count
    now[0] += 5.0
    shown.tick()
    assert status.text() == "Loading the model… 5 s"


def test_a_fresh_load_does_not_reopen_capture_and_a_kept_one_only_for_a_new_arm(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    from engine.arms import Arm
    from engine.trace import read_trace

    window = make_window()

    def unseals(arm: Arm) -> int:
        window._apply_settings(dataclasses.replace(window.settings, arm=arm))
        with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS):
            window.start_conversation()
        qtbot.waitUntil(
            lambda: not window.display.clear_charts and len(window.panel.history) >= 2,
            timeout=SESSION_MS,
        )
        with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
            window.stop_conversation()
        assert window.controller.trace is not None
        _, records = read_trace(window.controller.trace)
        return sum(e["kind"] == "unseal" for r in records for e in r["events"])

    assert unseals(Arm.SRC) == 0  # warmed by the load: captures nothing in the conversation
    assert unseals(Arm.SRC) == 0  # kept, same arm: its graphs are there
    assert unseals(Arm.SR) == 1  # kept, an arm never warmed: capture opens once
    assert unseals(Arm.SR) == 0  # ... and not again

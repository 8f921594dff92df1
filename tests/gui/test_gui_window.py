"""The window opens, settings persist across a restart, and a bad checkpoint is an error shown."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

from app.settings import load_settings, save_settings
from engine.arms import Arm
from tests.gui.conftest import small_cpu_settings

if TYPE_CHECKING:
    from app.gui.settings.dialog import SettingsDialog
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def test_window_opens_idle_with_the_synthetic_banner(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    from app.gui.window.banners import SYNTHETIC_TEXT

    window = make_window()
    qtbot.waitExposed(window)
    assert window.windowTitle() == "DuplexCadence"
    assert window.banner.isVisible() and window.banner.label.text() == SYNTHETIC_TEXT
    assert window.toolbar.start_button.isEnabled()
    assert window.conversation.indicator.text == "Idle"
    assert window.session_card.value("input") == "talk.wav"
    assert window.session_card.value("arm") == "SRc"
    assert window.error_strip.text() == ""


def _apply(dialog: SettingsDialog, qtbot: QtBot, close: bool = True) -> None:
    dialog.validate(close=close)
    qtbot.waitUntil(lambda: dialog.buttons.isEnabled(), timeout=30_000)


def test_settings_and_geometry_survive_a_restart(
    make_window: Callable[..., MainWindow], qtbot: QtBot, settings_file: Path
) -> None:
    first = make_window()
    first.resize(760, 750)  # inside the offscreen screen (800x800): restore clamps
    dialog = first.open_settings()
    dialog.arm.setCurrentIndex(dialog.arm.findData(Arm.R.value))
    dialog.push_to_talk.setChecked(True)
    dialog.audit.setChecked(True)
    with qtbot.waitSignal(dialog.finished, timeout=30_000):
        _apply(dialog, qtbot)
    assert first.settings.arm is Arm.R
    first.close()

    saved = load_settings(settings_file)
    assert (saved.arm, saved.push_to_talk, saved.audit) == (Arm.R, True, True)
    assert (saved.model_size, saved.device) == ("small", "cpu")  # untouched fields kept
    second = make_window()
    assert second.settings == saved
    assert second.toolbar.arm.currentData() == "R"
    assert second.toolbar.talk_action.isVisible()  # push-to-talk shows its button
    assert (second.width(), second.height()) == (760, 750)


def test_a_bad_checkpoint_folder_is_an_error_and_the_app_keeps_running(
    make_window: Callable[..., MainWindow], qtbot: QtBot, settings_file: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "not-a-checkpoint"
    empty.mkdir()
    window = make_window()
    before = settings_file.read_text()
    dialog = window.open_settings()
    dialog.checkpoint.setText(str(empty))
    dialog.model_size.setCurrentIndex(dialog.model_size.findData("full"))
    _apply(dialog, qtbot)
    assert (
        "lacks flow.yaml" in dialog.error_text
        and "choose the token2wav folder" in dialog.error_text
    )
    assert dialog.isVisible()  # stays open for the fix
    assert settings_file.read_text() == before and window.settings.checkpoint is None
    dialog.reject()

    # The same folder in the settings file: Start reports it, and the window stays usable.
    save_settings(small_cpu_settings(checkpoint=empty, model_size="full"), settings_file)
    window.close()
    window = make_window()
    with qtbot.waitSignal(window.controller.ended, timeout=60_000) as ended:
        window.start_conversation()
    assert ended.args == ["failed"]
    assert "lacks flow.yaml" in window.error_strip.text()
    assert window.controller.state.value == "idle" and window.toolbar.start_button.isEnabled()


def test_space_is_push_to_talk_and_never_presses_the_focused_button(
    make_window: Callable[..., MainWindow], settings_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    save_settings(small_cpu_settings(push_to_talk=True), settings_file)
    window = make_window()
    held: list[bool] = []
    monkeypatch.setattr(window.controller, "set_push_to_talk", held.append)
    window.toolbar.start_button.setFocus()
    QTest.keyPress(window.toolbar.start_button, Qt.Key.Key_Space)
    assert window.toolbar.talk_button.isDown()
    QTest.keyRelease(window.toolbar.start_button, Qt.Key.Key_Space)
    assert held == [True, False] and not window.toolbar.talk_button.isDown()
    assert window.controller.state.value == "idle"  # Space did not click Start


def test_summary_card_shows_audit_mode_verdict(qtbot: QtBot) -> None:
    from app.gui.live.history import History
    from app.gui.live.summary import SummaryCard
    from app.gui.worker.feed import PeriodView

    card = SummaryCard(window=300)
    qtbot.addWidget(card)

    def show(audit: dict[str, object] | None) -> str:
        history = History()
        history.extend([PeriodView(0, 0.0, 5.0, 1000.0, False, "SRc", "listen", 0.0, audit=audit)])
        card.refresh(history)
        return card.chips["audit"].value.text()

    assert show(None) == "off"
    assert show({"active": False}) == "no carry (arm)"
    assert show({"active": True, "agreements_total": 12, "divergences_total": 0}) == "12 agree"
    diverged = {"active": True, "divergences_total": 1, "first": "estimator_att at call 2"}
    assert show(diverged) == "1 diverged"
    assert "call 2" in card.chips["audit"].toolTip()


def test_minicpmo45_runs_the_folders_code_only_once_the_box_is_ticked(
    make_window: Callable[..., MainWindow], qtbot: QtBot, settings_file: Path, tmp_path: Path
) -> None:
    from tests.test_minicpmo45_folder import make_folder

    folder = make_folder(tmp_path / "MiniCPM-o-4_5")
    window = make_window()
    dialog = window.open_settings()
    dialog.family.setCurrentIndex(dialog.family.findData("minicpmo45"))
    dialog.checkpoint.setText(str(folder))
    # The stand-in folder has no assets/token2wav: the small random decoder speaks.
    dialog.model_size.setCurrentIndex(dialog.model_size.findData("small"))
    _apply(dialog, qtbot, close=False)
    assert "Run the checkpoint's own code" in dialog.error_text
    assert window.settings.family != "minicpmo45"  # refused: nothing applied
    dialog.trust_code.setChecked(True)
    with qtbot.waitSignal(dialog.finished, timeout=30_000):
        _apply(dialog, qtbot)
    assert window.settings.family == "minicpmo45" and window.settings.trust_checkpoint_code
    assert load_settings(settings_file).trust_checkpoint_code

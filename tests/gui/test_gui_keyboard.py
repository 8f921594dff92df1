"""The keyboard drives the window: F5 always starts and stops, Esc stops, the menus' shortcuts,
a Tab order that reaches every control (and never the chart canvas), names on every control."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

from tests.gui.conftest import SESSION_MS

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def _key(window: MainWindow, key: object, modifier: object = None) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    target = window.focusWidget() or window
    QTest.keyClick(target, key, modifier or Qt.KeyboardModifier.NoModifier)  # type: ignore[arg-type]


def _activate(window: MainWindow) -> None:
    from PySide6.QtTest import QTest

    window.activateWindow()
    assert QTest.qWaitForWindowActive(window, 5000), "the window never became active"


def test_f5_starts_and_stops_every_time_and_esc_stops(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    from PySide6.QtCore import Qt

    window = make_window(realtime=True)
    _activate(window)
    for stop_key in (Qt.Key.Key_F5, Qt.Key.Key_Escape, Qt.Key.Key_F5):
        with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS):
            _key(window, Qt.Key.Key_F5)
        assert window.toolbar.start_button.text().endswith("Stop")
        assert window.start_action.shortcut().toString() == "F5"  # survives the text change
        with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS) as ended:
            _key(window, stop_key)
        assert ended.args == ["stopped"]
        assert window.toolbar.start_button.text().endswith("Start")
    assert not window.stop_action.isEnabled()  # Esc does nothing while idle


def test_menus_hold_every_command_with_its_shortcut(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    from PySide6.QtCore import Qt

    window = make_window()
    menus = {
        m.title().replace("&", ""): m for m in window.menuBar().findChildren(type(window.view_menu))
    }
    assert {"File", "View", "Help"} <= set(menus)
    shortcuts = {
        a.text().replace("&", ""): a.shortcut().toString()
        for menu in menus.values()
        for a in menu.actions()
        if not a.isSeparator()
    }
    assert shortcuts["Start conversation"] == "F5" and shortcuts["Stop conversation"] == "Esc"
    assert shortcuts["Settings…"] == "Ctrl+," and shortcuts["Export…"] == "Ctrl+E"
    assert shortcuts["Quit"] == "Ctrl+Q" and shortcuts["DuplexCadence Help"] == "F1"
    assert "About DuplexCadence" in shortcuts
    assert not window.export_action.isEnabled()  # nothing to export before a session

    _activate(window)
    _key(window, Qt.Key.Key_F1)
    assert window.help_dialog is not None and window.help_dialog.isVisible()
    text = window.help_dialog.browser.toPlainText()
    for words in ("Arms", "Period and budget", "captured", "CPU", "The paper", "random weights"):
        assert words in text
    window.help_dialog.close()
    _activate(window)
    _key(window, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    assert window.settings_dialog is not None and window.settings_dialog.isVisible()
    window.settings_dialog.reject()
    _activate(window)
    _key(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    assert not window.isVisible()


def _focus_chain(window: MainWindow) -> list[QWidget]:
    """The widgets Tab visits from the Start button, in order, once round."""
    from PySide6.QtCore import Qt

    first = window.toolbar.start_button
    first.setFocus(Qt.FocusReason.TabFocusReason)
    chain, widget = [first], first.nextInFocusChain()
    while widget is not first and len(chain) < 500:
        reachable = (
            widget.isVisible()
            and widget.isEnabled()
            and bool(widget.focusPolicy() & Qt.FocusPolicy.TabFocus)
            and widget.window() is window
        )
        if reachable:
            chain.append(widget)
        widget = widget.nextInFocusChain()
    return chain


def test_tab_reaches_every_control_and_each_is_named_and_explained(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QWidget

    window = make_window()
    _activate(window)
    chain = _focus_chain(window)
    tb, card = window.toolbar, window.conversation
    settings_button = tb.widgetForAction(window.settings_action)
    banner_button = window.banner.findChildren(QWidget)[-1]
    for control in (tb.start_button, tb.arm, settings_button, card.mic_gain, card.volume,
                    card.mute, card.mic_clip, card.out_limit, banner_button):  # fmt: skip
        assert control in chain, f"Tab never reaches {control.accessibleName() or control}"
    assert window.panel.canvas not in chain  # the chart canvas takes no focus
    for control in chain:
        assert control.accessibleName(), f"{control} has no accessible name"
        assert control.accessibleDescription() or control.toolTip(), f"{control} unexplained"
    # Tab itself walks the same chain: press it through once and come back to Start.
    tb.start_button.setFocus(Qt.FocusReason.TabFocusReason)
    seen = []
    for _ in range(len(chain)):
        seen.append(window.focusWidget())
        _key(window, Qt.Key.Key_Tab)
    assert window.focusWidget() is tb.start_button
    assert settings_button in seen and window.panel.canvas not in seen


def test_a_wav_file_becomes_the_microphone_from_the_file_menu(
    make_window: Callable[..., MainWindow], talk_wav: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PySide6.QtWidgets import QFileDialog

    window = make_window()
    window.use_input_wav(None)
    assert window.route.input_wav is None and not window.device_action.isEnabled()
    monkeypatch.setattr(
        QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (str(talk_wav), ""))
    )
    window.wav_action.trigger()
    assert window.route.input_wav == talk_wav
    assert window.session_card.value("input") == "talk.wav"
    assert window.device_action.isEnabled()

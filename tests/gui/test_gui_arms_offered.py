"""The arm box offers only the arms the loaded session can switch to live, each with its
meaning; a model that replays nothing offers none and says why."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

from app.gui.words import ARM_WORDS, NO_ARMS
from engine.arms import Arm, switchable_arms

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def _listed(window: MainWindow) -> list[str]:
    box = window.toolbar.arm
    return [box.itemText(i) for i in range(box.count())]


def test_the_box_lists_what_the_session_can_switch_to(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    window = make_window()
    toolbar = window.toolbar
    lean = switchable_arms(envelope=False)
    toolbar.offer_arms(lean)
    assert _listed(window) == [f"{arm.value} — {ARM_WORDS[arm]}" for arm in lean]
    assert toolbar.arm.currentData() == "SRc" and toolbar.arm.isEnabled()
    toolbar.offer_arms(())
    assert _listed(window) == [NO_ARMS] and not toolbar.arm.isEnabled()
    assert toolbar.arm.currentData() == "SRc"  # the arm the session runs, kept

    with qtbot.waitSignal(window.controller.ready, timeout=60_000) as ready:
        window.start_conversation()
    info = ready.args[0]
    assert info.switchable_arms == tuple(str(arm) for arm in Arm)  # the stock envelope loaded
    assert len(_listed(window)) == len(Arm) and toolbar.arm.isEnabled()
    with qtbot.waitSignal(window.controller.ended, timeout=60_000):
        window.stop_conversation()
    assert len(_listed(window)) == len(Arm)  # idle: the next session starts with any arm

"""The basic voice is the window's default: one plain line says it is a cascade and where the
real thing is; without its packages the window falls back to random weights in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

from adapters.basic.family import BASIC
from app.gui.words import CASCADE_NOTE
from app.settings import Settings, save_settings
from tests.default_family import basic_missing, basic_present

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def test_the_basic_voice_says_it_is_a_cascade(
    make_window: Callable[..., MainWindow],
    qtbot: QtBot,
    settings_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    basic_present(monkeypatch)
    save_settings(Settings(), settings_file)  # the defaults: the basic voice
    window = make_window()
    qtbot.waitExposed(window)
    assert window.settings.family == "basic"
    assert window.cascade_note.isVisible() and window.cascade_note.label.text() == CASCADE_NOTE
    assert "cascade" in CASCADE_NOTE and "Moshi" in CASCADE_NOTE and "MiniCPM-o 4.5" in CASCADE_NOTE
    assert not window.banner.isVisible()  # it speaks: no random-weights warning
    assert window.session_card.value("model") == BASIC.title
    assert window.error_strip.text() == ""


def test_without_its_packages_the_default_falls_back_in_one_line(
    make_window: Callable[..., MainWindow],
    qtbot: QtBot,
    settings_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    basic_missing(monkeypatch)
    save_settings(Settings(), settings_file)
    window = make_window()
    qtbot.waitExposed(window)
    assert window.settings.family == "synthetic"
    line = window.error_strip.text()
    assert "\n" not in line and "no-such-package" in line and "scripts/setup.sh" in line
    assert "random weights" in line
    assert window.banner.isVisible() and not window.cascade_note.isVisible()


def test_a_full_duplex_family_shows_no_cascade_note(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    window = make_window()  # the tests' small synthetic Token2Wav
    qtbot.waitExposed(window)
    assert not window.cascade_note.isVisible()

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


def test_the_first_run_note_says_use_headphones_when_the_voice_plays_on_a_device(
    gui_app: object, qtbot: QtBot, settings_file: Path, tmp_path: Path
) -> None:
    from app.gui.window.main_window import MainWindow
    from app.gui.words import HEADPHONES
    from app.gui.worker.routes import AudioRoute

    window = MainWindow(
        settings_file=settings_file, route=AudioRoute(output="device"),
        sessions_dir=tmp_path / "sessions",
    )  # fmt: skip
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    assert window.cascade_note.isVisible() and window.cascade_note.headphones.isVisible()
    assert not window.cascade_note.label.isVisible()  # a full-duplex family: no cascade line
    assert HEADPHONES in window.cascade_note.headphones.text()
    help_text = window.open_help().browser.toPlainText()
    assert "Speakers and headphones" in help_text
    assert " ".join(HEADPHONES.split()) in " ".join(help_text.split())


def test_settings_grey_out_what_the_family_ignores(
    make_window: Callable[..., MainWindow], monkeypatch: pytest.MonkeyPatch
) -> None:
    basic_present(monkeypatch)
    window = make_window()
    dialog = window.open_settings()
    assert dialog.arm.isEnabled() and dialog.checkpoint.isEnabled() and dialog.voice.isEnabled()
    dialog.checkpoint.setText("/somewhere/flow")
    dialog.family.setCurrentIndex(dialog.family.findData("basic"))
    for ignored in (dialog.arm, dialog.audit, dialog.voice, dialog.model_size, dialog.trust_code):
        assert not ignored.isEnabled()
        assert ignored.toolTip().startswith("Basic voice ignores this.")
    assert dialog.checkpoint.isEnabled()  # a folder of larger models it may use instead
    assert dialog.checkpoint.placeholderText().startswith("none: its own models")
    assert dialog.settings().checkpoint == Path("/somewhere/flow")
    dialog.voice.setText("/somewhere/voice.wav")
    assert dialog.settings().voice is None  # not kept for a family that takes none
    assert dialog.echo_cancel.isEnabled() and dialog.input_device.isEnabled()
    assert dialog.device.isEnabled()  # the basic voice runs its recognizer and replies on a GPU
    dialog.family.setCurrentIndex(dialog.family.findData("moshi"))
    assert dialog.arm.isEnabled() and dialog.checkpoint.isEnabled()
    assert not dialog.voice.isEnabled() and not dialog.audit.isEnabled()  # Moshi reads neither
    assert "seeded random weights" in dialog.checkpoint.placeholderText()
    assert dialog.settings().checkpoint == Path("/somewhere/flow")
    dialog.reject()

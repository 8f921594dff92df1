"""``duplexcadence gui`` where no window can open: a clear message and exit status 3, never
Qt's abort; ``--help`` still works."""

from __future__ import annotations

import pytest

from app.cli import main
from app.gui import EXIT_NO_DISPLAY


def test_gui_without_a_display_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    assert main(["gui"]) == EXIT_NO_DISPLAY
    err = capsys.readouterr().err
    assert "no display" in err and "duplexcadence demo" in err and "xvfb-run" in err


def test_gui_help_needs_no_display(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as done:
        main(["gui", "--help"])
    assert done.value.code == 0
    assert "--input-wav" in capsys.readouterr().out

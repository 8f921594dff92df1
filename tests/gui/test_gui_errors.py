"""Errors early and in the window's words: devices and the checkpoint checked before the model
loads, a vanished checkpoint folder flagged at launch, a settings dialog that explains itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

from app.audio.devices import AudioError
from app.gui.worker.routes import AudioRoute
from app.gui.worker.worker import describe_error
from app.settings import save_settings
from tests.gui.conftest import SESSION_MS, small_cpu_settings

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def test_no_microphone_is_said_before_loading_in_the_windows_words(
    make_window: Callable[..., MainWindow], qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_device(name: str | None, kind: str, host_api: str | None = None) -> None:
        raise AudioError(
            f"no audio {kind} device found: connect one, pass --{kind}-device NAME, or start "
            "the virtual device"
        )

    monkeypatch.setattr("app.gui.worker.preflight.find_device", no_device)
    window = make_window()
    window.route = AudioRoute(input_wav=None, output="none")
    stages: list[str] = []
    window.controller.progress.connect(lambda stage, _: stages.append(stage))
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS) as ended:
        window.start_conversation()
    assert ended.args == ["failed"] and stages == []  # nothing loaded
    message = window.error_strip.text()
    assert "Cannot use a default microphone (no audio input device found)" in message
    assert "Settings > Audio" in message and "File > Use a WAV file" in message
    assert "--input-device" not in message and "Error" not in message


def test_a_vanished_checkpoint_folder_is_flagged_at_launch(
    make_window: Callable[..., MainWindow], settings_file: Path, tmp_path: Path
) -> None:
    gone = tmp_path / "was-here"
    save_settings(small_cpu_settings(checkpoint=gone), settings_file)
    window = make_window()
    assert f"The checkpoint folder {gone} no longer exists" in window.error_strip.text()
    assert "Settings" in window.error_strip.text()


def test_an_empty_checkpoint_file_is_caught_and_the_error_clears_after_the_fix(
    make_window: Callable[..., MainWindow], qtbot: QtBot, tmp_path: Path
) -> None:
    import zipfile

    folder = tmp_path / "t2w"
    folder.mkdir()
    (folder / "flow.yaml").write_text("flow: 1\n")
    (folder / "flow.pt").write_bytes(b"")
    with zipfile.ZipFile(folder / "hift_original.pt", "w") as archive:
        archive.writestr("a/data.pkl", b"\x80\x02.")
    window = make_window()
    dialog = window.open_settings()
    height = dialog.height()
    dialog.checkpoint.setText(str(folder))
    dialog.validate(close=False)
    qtbot.waitUntil(lambda: dialog.buttons.isEnabled(), timeout=30_000)
    assert "flow.pt is empty (0 bytes)" in dialog.error_text
    assert dialog.height() >= height  # the dialog grew; the form was not squeezed
    dialog.checkpoint.clear()  # the fix
    assert dialog.error_text == ""
    dialog.reject()


def test_the_settings_dialog_explains_every_field_and_offers_no_cuda_without_a_gpu(
    make_window: Callable[..., MainWindow], monkeypatch: pytest.MonkeyPatch
) -> None:
    from PySide6.QtWidgets import QCheckBox, QComboBox, QLineEdit, QPushButton

    monkeypatch.setattr("app.gui.settings.dialog.cuda_present", lambda: False)
    window = make_window()
    dialog = window.open_settings()
    devices = [dialog.device.itemData(i) for i in range(dialog.device.count())]
    assert "cuda" not in devices and {"auto", "cpu"} <= set(devices)
    names = []
    for kind in (QComboBox, QLineEdit, QCheckBox, QPushButton):
        for control in dialog.findChildren(kind):
            if control.parent() is dialog.buttons:
                continue  # OK / Cancel / Apply speak for themselves
            assert control.toolTip(), f"{control.accessibleName() or control} has no tooltip"
            names.append(control.accessibleName())
    assert all(names) and len(names) == len(set(names))  # no two "Browse…" alike
    dialog.reject()


def test_an_unchecked_checkbox_is_visible(make_window: Callable[..., MainWindow]) -> None:
    import numpy as np
    from PySide6.QtGui import QColor, QImage

    from app.gui import theme

    window = make_window()
    dialog = window.open_settings()
    box = dialog.audit
    box.setChecked(False)
    image = box.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    width, height = image.width(), image.height()
    pixels = np.frombuffer(image.constBits(), np.uint32, width * height).reshape(height, width)
    indicator = pixels[:, :height]  # the square at the left
    rgb = np.stack([(indicator >> s) & 0xFF for s in (16, 8, 0)], axis=-1).astype(float)
    luminance = rgb @ np.array([0.2126, 0.7152, 0.0722])
    background = QColor(theme.BACKGROUND)
    base = 0.2126 * background.red() + 0.7152 * background.green() + 0.0722 * background.blue()
    assert luminance.max() - base > 80  # a border you can see, not 1.05:1
    dialog.reject()


def test_errors_never_show_an_exception_class() -> None:
    assert describe_error(ValueError("checkpoint missing: choose one")) == (
        "Checkpoint missing: choose one"
    )
    assert "ValueError" not in describe_error(ValueError())

"""The settings dialog: model, engine (ablation arm, audit) and audio, validated before saving.

Apply/OK validate on a pool thread (``check_settings``); a bad value (a checkpoint folder
without ``flow.pt``, a voice without a checkpoint) shows its message in red inside the dialog,
which stays open — nothing is saved and the running conversation is untouched. Settings that
pass are emitted with ``applied``; the window saves them and switches the arm at once (the arm
applies at the next period), the rest at the next start.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from adapters.registry import family
from app.gui import theme
from app.gui.settings.check import SettingsCheck
from app.gui.settings.devices import DeviceChoice, device_choices
from app.settings import DEVICES, FAMILIES, MODEL_SIZES, Settings
from engine.arms import Arm

__all__ = ["ARM_HELP", "SettingsDialog"]

SIZE_LABELS = {
    "auto": "auto (full on CUDA, small on CPU)",
    "full": "full (released sizes)",
    "small": "small (CPU real time, random weights only)",
}
ARM_HELP = {
    Arm.EAGER: "eager: stock allocation, no replay",
    Arm.S: "S: state rule only (demand-sized regions, carry)",
    Arm.R: "R: replay per solver step",
    Arm.RC: "Rc: replay per chunk",
    Arm.SR: "SR: state rule + replay per solver step",
    Arm.SRC: "SRc: state rule + replay per chunk (default)",
}


def _path_row(edit: QLineEdit, browse: QPushButton) -> QHBoxLayout:
    clear = QPushButton("Clear")
    clear.clicked.connect(edit.clear)
    row = QHBoxLayout()
    row.addWidget(edit, 1)
    row.addWidget(browse)
    row.addWidget(clear)
    return row


def _combo(items: list[tuple[str, Any]], current: Any) -> QComboBox:
    combo = QComboBox()
    for label, data in items:
        combo.addItem(label, data)
    index = next((i for i, (_, data) in enumerate(items) if data == current), 0)
    combo.setCurrentIndex(index)
    return combo


class SettingsDialog(QDialog):
    """Edit a copy of the settings; ``applied(Settings)`` fires for each validated Apply/OK."""

    applied = Signal(object)

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(600)
        self._base = dataclasses.replace(settings)
        self._check: SettingsCheck | None = None
        self._close_after = False
        layout = QVBoxLayout(self)
        layout.addWidget(self._model_group(settings))
        layout.addWidget(self._engine_group(settings))
        layout.addWidget(self._audio_group(settings))
        self.hint = QLabel(
            "The arm switches at the next period, without a restart. Model, device and audio "
            "changes apply when the conversation starts again."
        )
        self.hint.setObjectName("hint")
        self.hint.setWordWrap(True)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.hide()
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.Apply
        )
        self.buttons = buttons
        buttons.accepted.connect(lambda: self.validate(close=True))
        buttons.rejected.connect(self.reject)
        apply = buttons.button(QDialogButtonBox.StandardButton.Apply)
        apply.clicked.connect(lambda: self.validate(close=False))
        layout.addWidget(self.hint)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    # -- groups ------------------------------------------------------------------------------

    def _model_group(self, s: Settings) -> QGroupBox:
        box = QGroupBox("Model")
        form = QFormLayout(box)
        self.family = _combo([(family(f).title, f) for f in FAMILIES], s.family)
        self.model_size = _combo([(SIZE_LABELS.get(m, m), m) for m in MODEL_SIZES], s.model_size)
        self.checkpoint = QLineEdit(str(s.checkpoint) if s.checkpoint else "")
        self.checkpoint.setPlaceholderText("none: seeded random weights (the audio is not speech)")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_checkpoint)
        self.voice = QLineEdit(str(s.voice) if s.voice else "")
        self.voice.setPlaceholderText("none: a seeded random voice (needs no checkpoint)")
        browse_voice = QPushButton("Browse…")
        browse_voice.clicked.connect(self._browse_voice)
        self.device = _combo([(d, d) for d in DEVICES], s.device)
        form.addRow("Family", self.family)
        form.addRow("Size", self.model_size)
        form.addRow("Checkpoint folder", _path_row(self.checkpoint, browse))
        form.addRow("Voice prompt", _path_row(self.voice, browse_voice))
        form.addRow("Compute device", self.device)
        return box

    def _engine_group(self, s: Settings) -> QGroupBox:
        box = QGroupBox("Engine")
        form = QFormLayout(box)
        # Qt stores a StrEnum as its plain string: the combo holds values, Arm() reads them back.
        self.arm = _combo([(ARM_HELP[a], a.value) for a in Arm], Arm(s.arm).value)
        self.audit = QCheckBox(
            "Audit mode (shadow every carry retention with the stock concatenation; S, SR, SRc)"
        )
        self.audit.setChecked(s.audit)
        form.addRow("Ablation arm", self.arm)
        form.addRow("", self.audit)
        return box

    def _audio_group(self, s: Settings) -> QGroupBox:
        box = QGroupBox("Audio")
        form = QFormLayout(box)
        inputs, outputs, problem = device_choices()
        self.input_device = self._device_combo(inputs, s.input_device, s.host_api)
        self.output_device = self._device_combo(outputs, s.output_device, s.host_api)
        self.echo_cancel = QCheckBox("Echo cancellation (needs pywebrtc-audio)")
        self.echo_cancel.setChecked(s.echo_cancel)
        self.push_to_talk = QCheckBox("Push-to-talk (hold Space or the Talk button)")
        self.push_to_talk.setChecked(s.push_to_talk)
        form.addRow("Input", self.input_device)
        form.addRow("Output", self.output_device)
        if problem:
            note = QLabel(problem)
            note.setObjectName("hint")
            note.setWordWrap(True)
            form.addRow("", note)
        form.addRow("", self.echo_cancel)
        form.addRow("", self.push_to_talk)
        return box

    @staticmethod
    def _device_combo(choices: list[DeviceChoice], name: str | None, host: str | None) -> QComboBox:
        combo = QComboBox()
        for choice in choices:
            combo.addItem(choice.label, choice)
        if name is not None:
            match = [i for i, c in enumerate(choices) if c.name == name]
            exact = [i for i in match if choices[i].host_api == host]
            if exact or match:
                combo.setCurrentIndex((exact or match)[0])
            else:  # remembered but absent now: keep it, marked, rather than forget it silently
                combo.addItem(f"{name}  (not connected)", DeviceChoice(name, name, host))
                combo.setCurrentIndex(combo.count() - 1)
        return combo

    def _browse_checkpoint(self) -> None:
        chosen = QFileDialog.getExistingDirectory(
            self, "Token2Wav checkpoint folder", self.checkpoint.text()
        )
        if chosen:
            self.checkpoint.setText(chosen)

    def _browse_voice(self) -> None:
        chosen, _ = QFileDialog.getOpenFileName(
            self, "Voice prompt", self.voice.text(), "WAV files (*.wav)"
        )
        if chosen:
            self.voice.setText(chosen)

    # -- result ------------------------------------------------------------------------------

    def settings(self) -> Settings:
        """The settings the fields describe (values the dialog does not show are kept)."""
        inp: DeviceChoice = self.input_device.currentData()
        out: DeviceChoice = self.output_device.currentData()
        checkpoint, voice = self.checkpoint.text().strip(), self.voice.text().strip()
        return dataclasses.replace(
            self._base,
            family=self.family.currentData(),
            model_size=self.model_size.currentData(),
            checkpoint=Path(checkpoint).expanduser() if checkpoint else None,
            voice=Path(voice).expanduser() if voice else None,
            device=self.device.currentData(),
            arm=Arm(self.arm.currentData()),
            audit=self.audit.isChecked(),
            input_device=inp.name,
            output_device=out.name,
            host_api=inp.host_api or out.host_api,
            echo_cancel=self.echo_cancel.isChecked(),
            push_to_talk=self.push_to_talk.isChecked(),
        )

    def validate(self, close: bool) -> None:
        """Check the fields off the GUI thread; ``applied`` (and closing) only if they pass."""
        if self._check is not None:
            return  # one check at a time; the buttons are disabled meanwhile
        self._close_after = close
        self.buttons.setEnabled(False)
        self.error.setText("Checking…")
        self.error.setStyleSheet(f"color: {theme.TEXT_DIM};")
        self.error.show()
        self._check = SettingsCheck(self.settings())
        self._check.setAutoDelete(False)
        self._check.signals.passed.connect(self._passed)
        self._check.signals.failed.connect(self._failed)
        self._check.start()

    def _passed(self, settings: Settings) -> None:
        self._check = None
        self.buttons.setEnabled(True)
        self.error.hide()
        self._base = dataclasses.replace(settings)
        self.applied.emit(settings)
        if self._close_after:
            self.accept()

    def _failed(self, message: str) -> None:
        self._check = None
        self.buttons.setEnabled(True)
        self.error.setStyleSheet(f"color: {theme.ERROR};")
        self.error.setText(message)
        self.error.show()

    @property
    def error_text(self) -> str:
        return self.error.text() if self.error.isVisible() else ""

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
from app.gui.a11y import explain
from app.gui.settings.check import SettingsCheck
from app.gui.settings.devices import DeviceChoice, cuda_present, device_choices
from app.gui.settings.models import ModelsDialog
from app.gui.settings.role import role_field, role_value
from app.gui.words import ARM_WORDS
from app.settings import DEVICES, FAMILIES, MODEL_SIZES, Settings
from engine.arms import Arm

__all__ = ["ARM_HELP", "SettingsDialog"]

DEVICE_LABELS = {
    "auto": "auto (the GPU when there is one)",
    "cuda": "cuda (NVIDIA GPU)",
    "cpu": "cpu",
}
SIZE_LABELS = {
    "auto": "auto (full with a checkpoint or on CUDA, else small)",
    "full": "full (released sizes)",
    "small": "small (CPU real time, random weights only)",
}
ARM_HELP = {arm: f"{arm.value} — {ARM_WORDS[arm]}" for arm in Arm}


def _path_row(edit: QLineEdit, browse: QPushButton, what: str) -> tuple[QHBoxLayout, QPushButton]:
    """The path field, its Browse and Clear buttons in a row; returns the row and Clear."""
    clear = explain(QPushButton("Clear"), f"clear the {what}", f"Forget the {what}.")
    clear.clicked.connect(edit.clear)
    row = QHBoxLayout()
    row.addWidget(edit, 1)
    row.addWidget(browse)
    row.addWidget(clear)
    return row, clear


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
        self.models_endpoint: str | None = None  # the hub's address (None: huggingface.co)
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
        for combo in (self.family, self.model_size, self.device, self.arm,
                      self.input_device, self.output_device):  # fmt: skip
            combo.currentIndexChanged.connect(self._edited)
        for edit in (self.checkpoint, self.voice):
            edit.textChanged.connect(self._edited)
        for check in (self.audit, self.echo_cancel, self.push_to_talk):
            check.toggled.connect(self._edited)
        self.family.currentIndexChanged.connect(self._follow_family)
        self._follow_family()

    def _follow_family(self) -> None:
        """Grey out what the chosen family ignores (its ``reads``), saying why."""
        face = family(self.family.currentData())
        self.checkpoint.setPlaceholderText(
            "none: its own models (a folder may bring larger ones)"
            if face.ships_weights
            else "none: seeded random weights (the audio is not speech)"
        )
        for name, widgets in self._reads.items():
            used = name in face.reads
            for widget in widgets:
                widget.setEnabled(used)
                tip = widget.accessibleDescription()
                widget.setToolTip(
                    tip if used else f"{face.title.split(':')[0]} ignores this. {tip}"
                )

    def _edited(self) -> None:
        """A field changed: an error about the old values no longer holds."""
        if self._check is None and self.error.isVisible():
            self.error.hide()

    # -- groups ------------------------------------------------------------------------------

    def _model_group(self, s: Settings) -> QGroupBox:
        box = QGroupBox("Model")
        form = QFormLayout(box)
        self.family = explain(
            _combo([(family(f).title, f) for f in FAMILIES], s.family), "model family",
            "Which voice model to run. Each family declares its own timelines (period, windows).",
        )  # fmt: skip
        self.model_size = explain(
            _combo([(SIZE_LABELS.get(m, m), m) for m in MODEL_SIZES], s.model_size), "size",
            "The model's size: full is the released model (needs its checkpoint for speech); "
            "small keeps real time on a laptop CPU but only with random weights.",
        )  # fmt: skip
        self.checkpoint = explain(
            QLineEdit(str(s.checkpoint) if s.checkpoint else ""), "checkpoint folder",
            "The folder holding the model's weights (for Token2Wav: flow.yaml, flow.pt, "
            "hift_original.pt). "
            "Empty: seeded random weights, which make noise, not speech.",
        )  # fmt: skip
        browse = explain(
            QPushButton("Browse…"), "browse for the checkpoint folder",
            "Choose the checkpoint folder on disk.",
        )  # fmt: skip
        browse.clicked.connect(self._browse_checkpoint)
        fetch = explain(
            QPushButton("Models…"), "models",
            "Open the Models page: every model family, installed or not, where and what it "
            "needs, and downloads of Moshi, MiniCPM-o 4.5 and the basic voice's larger models "
            "(only when you ask).",
        )  # fmt: skip
        fetch.clicked.connect(self.open_models)
        self.voice = explain(
            QLineEdit(str(s.voice) if s.voice else ""), "voice prompt",
            "A WAV recording of the voice the assistant should speak with (needs a checkpoint); "
            "for PersonaPlex also a voice of its folder by name, e.g. NATF2.",
        )  # fmt: skip
        self.voice.setPlaceholderText("none: a seeded random voice (needs no checkpoint)")
        browse_voice = explain(
            QPushButton("Browse…"), "browse for the voice prompt", "Choose a voice recording."
        )
        browse_voice.clicked.connect(self._browse_voice)
        self.trust_code = explain(
            QCheckBox("Run the checkpoint's own code (only for a folder you trust)"),
            "run the checkpoint's code",
            "MiniCPM-o 4.5 ships its model code inside the checkpoint folder: tick this only for "
            "a folder you trust, since that code runs with your rights.",
        )  # fmt: skip
        self.trust_code.setChecked(s.trust_checkpoint_code)
        # No GPU driver here: "cuda" would only fail at Start, so it is not offered.
        offered = [d for d in DEVICES if d != "cuda" or cuda_present() or s.device == "cuda"]
        self.device = explain(
            _combo([(DEVICE_LABELS.get(d, d), d) for d in offered], s.device), "compute device",
            "Where the model runs: a GPU (cuda) launches recorded graphs; the CPU runs every "
            "operation directly. auto picks the GPU when there is one.",
        )  # fmt: skip
        form.addRow("Family", self.family)
        form.addRow("Size", self.model_size)
        checkpoint_row, clear_checkpoint = _path_row(self.checkpoint, browse, "checkpoint folder")
        checkpoint_row.insertWidget(2, fetch)
        form.addRow("Checkpoint folder", checkpoint_row)
        form.addRow("", self.trust_code)
        voice_row, clear_voice = _path_row(self.voice, browse_voice, "voice prompt")
        form.addRow("Voice prompt", voice_row)
        self.role = role_field(s.role)
        form.addRow("Role", self.role)
        form.addRow("Compute device", self.device)
        # The fields each family may ignore (Family.reads names them); Models… serves all.
        self._reads: dict[str, list[QWidget]] = {
            "model_size": [self.model_size],
            "checkpoint": [self.checkpoint, browse, clear_checkpoint],
            "trust_checkpoint_code": [self.trust_code],
            "voice": [self.voice, browse_voice, clear_voice],
            "role": [self.role],
            "device": [self.device],
        }
        return box

    def _engine_group(self, s: Settings) -> QGroupBox:
        box = QGroupBox("Engine")
        form = QFormLayout(box)
        # Qt stores a StrEnum as its plain string: the combo holds values, Arm() reads them back.
        self.arm = explain(
            _combo([(ARM_HELP[a], a.value) for a in Arm], Arm(s.arm).value), "arm",
            "How the engine runs the model (the paper's ablation arm); it also switches live "
            "from the toolbar. Help (F1) explains each.",
        )  # fmt: skip
        self.audit = explain(
            QCheckBox("Audit mode (check every carried state against the stock way, bit for bit)"),
            "audit mode",
            "Slower: every time the lean state carries memory over, the stock concatenation is "
            "computed too and compared. Shows agreements in the summary (S, SR, SRc arms).",
        )  # fmt: skip
        self.audit.setChecked(s.audit)
        form.addRow("Ablation arm", self.arm)
        form.addRow("", self.audit)
        self._reads.update(arm=[self.arm], audit=[self.audit])
        return box

    def _audio_group(self, s: Settings) -> QGroupBox:
        box = QGroupBox("Audio")
        form = QFormLayout(box)
        inputs, outputs, problem = device_choices()
        self.input_device = explain(
            self._device_combo(inputs, s.input_device, s.host_api), "microphone",
            "The microphone the model hears (File > Use a WAV file plays a recording instead).",
        )  # fmt: skip
        self.output_device = explain(
            self._device_combo(outputs, s.output_device, s.host_api), "speaker",
            "Where the assistant's voice plays.",
        )  # fmt: skip
        self.echo_cancel = explain(
            QCheckBox("Echo cancellation (needs pywebrtc-audio)"), "echo cancellation",
            "Remove the assistant's own voice from the microphone, for speakers without "
            "headphones; otherwise the model hears itself.",
        )  # fmt: skip
        self.echo_cancel.setChecked(s.echo_cancel)
        self.push_to_talk = explain(
            QCheckBox("Push-to-talk (hold Space or the Talk button)"), "push-to-talk",
            "The model hears you only while Space or the Talk button is held (half duplex).",
        )  # fmt: skip
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

    def open_models(self) -> ModelsDialog:
        """The Models page; a finished download fills the checkpoint folder."""
        dialog = ModelsDialog(self.models_endpoint, self, settings=self.settings())
        dialog.family_chosen.connect(
            lambda key: self.family.setCurrentIndex(self.family.findData(key))
        )
        dialog.chosen.connect(self.checkpoint.setText)
        dialog.open()
        return dialog

    def _browse_checkpoint(self) -> None:
        title = f"{family(self.family.currentData()).title}: checkpoint folder"
        chosen = QFileDialog.getExistingDirectory(self, title, self.checkpoint.text())
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
        reads = family(self.family.currentData()).reads  # what it ignores is not kept for it
        checkpoint = checkpoint if "checkpoint" in reads else ""
        voice = voice if "voice" in reads else ""
        return dataclasses.replace(
            self._base,
            family=self.family.currentData(),
            model_size=self.model_size.currentData(),
            checkpoint=Path(checkpoint).expanduser() if checkpoint else None,
            voice=Path(voice).expanduser() if voice else None,
            role=role_value(self.role),
            trust_checkpoint_code=self.trust_code.isChecked(),
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
        self.error.setText(message[:1].upper() + message[1:])
        self.error.show()
        # Grow to fit the message instead of squeezing the form above it.
        self.resize(self.width(), max(self.height(), self.sizeHint().height()))

    @property
    def error_text(self) -> str:
        return self.error.text() if self.error.isVisible() else ""

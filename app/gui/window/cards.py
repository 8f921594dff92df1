"""The cards of the window's left column: conversation state and meters, and the session facts.

The transcript, the window's main view, is :mod:`app.gui.window.transcript_view`."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from app.gui.a11y import explain
from app.gui.meters.clip_lamp import ClipLamp
from app.gui.meters.level_meter import LevelMeter
from app.gui.theme import card_title
from app.gui.window.state_indicator import StateIndicator
from app.gui.worker.controls import GAIN_RANGE_DB, VOLUME_RANGE_DB

__all__ = ["ConversationCard", "SessionCard"]


def _slider(low_high: tuple[int, int], value: int) -> QSlider:
    slider = QSlider(Qt.Orientation.Horizontal)
    slider.setRange(*low_high)
    slider.setSingleStep(1)
    slider.setPageStep(6)
    slider.setValue(value)
    return slider


class ConversationCard(QFrame):
    """Listen/speak state, the two level meters, microphone gain, volume, mute, clip lamps.

    The window connects the sliders and the mute button to the engine's audio controls; the
    lamps latch on the clip counts the window feeds them."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.indicator = StateIndicator()
        self.mic_meter = LevelMeter("Microphone (what the model hears)")
        self.out_meter = LevelMeter("Assistant (what you hear)")
        explain(
            self.mic_meter, "microphone level",
            "The microphone as the model hears it, after the gain; empty while push-to-talk "
            "is released. The white line holds the recent peak.",
        )  # fmt: skip
        explain(
            self.out_meter, "assistant level",
            "The assistant's voice as it is played, after volume, mute and the limiter.",
        )  # fmt: skip
        self.mic_gain = explain(
            _slider(GAIN_RANGE_DB, 0), "microphone gain",
            "Microphone gain in dB: raise it if the meter stays low while you talk, lower it "
            "if the clip lamp lights.",
        )  # fmt: skip
        self.mic_clip = ClipLamp("CLIP", "the microphone reached full scale (distorted input)")
        self.volume = explain(
            _slider(VOLUME_RANGE_DB, 0), "output volume",
            "Output volume in dB below the model's own level. A limiter keeps every sample "
            "below -1 dBFS whatever the volume.",
        )  # fmt: skip
        self.mute = explain(
            QPushButton("Mute"), "mute", "Silence the assistant (the conversation goes on)."
        )  # fmt: skip
        self.mute.setCheckable(True)
        self.out_limit = ClipLamp("LIMIT", "the limiter turned the output down to stop a clip")
        self.gain_value, self.volume_value = QLabel(), QLabel()
        for value in (self.gain_value, self.volume_value):
            value.setObjectName("hint")
            value.setMinimumWidth(QLabel("-60 dB").sizeHint().width())
        self.mic_gain.valueChanged.connect(lambda v: self.gain_value.setText(f"{v:+d} dB"))
        self.volume.valueChanged.connect(lambda v: self.volume_value.setText(f"{v:d} dB"))
        self.gain_value.setText("+0 dB")
        self.volume_value.setText("0 dB")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 12)
        layout.setSpacing(6)
        layout.addWidget(card_title("Conversation"))
        layout.addWidget(self.indicator)
        layout.addWidget(self.mic_meter)
        layout.addLayout(_row(QLabel("Gain"), self.mic_gain, self.gain_value, self.mic_clip))
        layout.addWidget(self.out_meter)
        layout.addLayout(
            _row(QLabel("Volume"), self.volume, self.volume_value, self.mute, self.out_limit)
        )


def _row(*widgets: QWidget) -> QHBoxLayout:
    row = QHBoxLayout()
    row.setSpacing(6)
    for widget in widgets:
        row.addWidget(widget, 1 if isinstance(widget, QSlider) else 0)
    return row


class SessionCard(QFrame):
    """Model, arm, device, audio routes and the trace file; values update in place."""

    FIELDS = (
        ("model", "Model"),
        ("arm", "Arm"),
        ("device", "Device"),
        ("input", "Input"),
        ("output", "Output"),
        ("periods", "Periods"),
        ("trace", "Trace"),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        form.setHorizontalSpacing(12)
        form.setVerticalSpacing(5)
        self.values: dict[str, QLabel] = {}
        for key, title in self.FIELDS:
            value = QLabel("—")
            value.setObjectName("value")
            value.setWordWrap(True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            name = QLabel(title)
            name.setObjectName("hint")
            form.addRow(name, value)
            self.values[key] = value
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 12)
        layout.setSpacing(8)
        layout.addWidget(card_title("Session"))
        layout.addLayout(form)

    def set(self, key: str, text: str, tip: str | None = None) -> None:
        label = self.values[key]
        if label.text() != text:
            label.setText(text)
        label.setToolTip(tip or "")

    def value(self, key: str) -> str:
        return self.values[key].text()

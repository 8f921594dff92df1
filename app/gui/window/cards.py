"""The cards of the window's left column: conversation state and meters, and the session facts."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QFrame, QLabel, QVBoxLayout, QWidget

from app.gui.meters.level_meter import LevelMeter
from app.gui.theme import card_title
from app.gui.window.state_indicator import StateIndicator

__all__ = ["ConversationCard", "SessionCard"]


class ConversationCard(QFrame):
    """Listen/speak state and the two level meters."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.indicator = StateIndicator()
        self.mic_meter = LevelMeter("Microphone (model input)")
        self.out_meter = LevelMeter("Assistant (output)")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 12)
        layout.setSpacing(8)
        layout.addWidget(card_title("Conversation"))
        layout.addWidget(self.indicator)
        layout.addWidget(self.mic_meter)
        layout.addWidget(self.out_meter)


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

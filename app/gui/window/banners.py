"""Strips across the top of the window: the synthetic-weights warning and error messages.

The synthetic banner must be impossible to miss: with seeded random weights the assistant's
audio is not speech, and a user who does not know that will think the app is broken.
Errors (a session that failed to build, an export that failed) show in an error strip that
stays until dismissed; the app keeps running.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from app.gui import theme
from app.gui.a11y import explain

__all__ = ["SYNTHETIC_TEXT", "ErrorStrip", "SyntheticBanner"]

SYNTHETIC_TEXT = (
    "Random weights: the audio is not speech; pick a checkpoint in Settings for speech."
)


class SyntheticBanner(QFrame):
    """Shown while the model (chosen or running) has seeded random weights."""

    open_settings = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        icon = QLabel("⚠")
        icon.setObjectName("bannerText")
        self.label = QLabel(SYNTHETIC_TEXT)
        self.label.setObjectName("bannerText")
        self.label.setWordWrap(True)
        button = explain(
            QPushButton("Choose a checkpoint…"), "choose a checkpoint",
            "Open Settings to choose a checkpoint folder, so the assistant speaks.",
        )  # fmt: skip
        button.clicked.connect(self.open_settings)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 6, 8, 6)
        layout.addWidget(icon)
        layout.addWidget(self.label, 1)
        layout.addWidget(button)


class ErrorStrip(QFrame):
    """A dismissible error message (the fix is in the text)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.setStyleSheet(
            f"QFrame#card {{ border: 1px solid {theme.ERROR}; background: #3a1f22; }}"
        )
        self.label = QLabel()
        self.label.setObjectName("error")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = explain(QPushButton("Dismiss"), "dismiss the error", "Hide this message.")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 6, 8, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(close)
        self.hide()

    def show_error(self, message: str) -> None:
        self.label.setText(message)
        self.show()

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

"""Strips across the top of the window: the synthetic-weights warning, the basic voice's note
and error messages.

The synthetic banner must be impossible to miss: with seeded random weights the assistant's
audio is not speech, and a user who does not know that will think the app is broken.
Errors (a session that failed to build, an export that failed) show in an error strip that
stays until dismissed; the app keeps running.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from adapters.registry import family
from app.gui import theme
from app.gui.a11y import explain
from app.gui.words import CASCADE_NOTE, HEADPHONES
from app.settings import Settings

__all__ = [
    "SYNTHETIC_TEXT",
    "CascadeNote",
    "ErrorStrip",
    "SyntheticBanner",
    "model_line",
    "random_weights",
]

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


def random_weights(settings: Settings) -> bool:
    """Whether ``settings`` run seeded random weights: a family that reads a checkpoint has
    none (the basic voice ships its own)."""
    face = family(settings.family)
    return settings.checkpoint is None and "checkpoint" in face.reads and not face.ships_weights


def model_line(settings: Settings) -> str:
    """The model the next Start loads, for the session card before it runs."""
    face = family(settings.family)
    if face.ships_weights:
        larger = f", larger models from {settings.checkpoint.name}" if settings.checkpoint else ""
        return face.title + larger
    if "checkpoint" not in face.reads:
        return face.title
    weights = "checkpoint" if settings.checkpoint else "seeded random weights"
    return f"{settings.family} ({settings.model_size}, {weights})"


class CascadeNote(QFrame):
    """The first-run note: one plain line while the chosen family is a cascade, not a
    full-duplex model, and the headphones hint while the voice plays on a device."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.label = explain(QLabel(CASCADE_NOTE), "about the basic voice", CASCADE_NOTE)
        self.headphones = explain(QLabel(HEADPHONES), "headphones", HEADPHONES)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 6, 8, 6)
        layout.setSpacing(2)
        for label in (self.label, self.headphones):
            label.setObjectName("hint")
            label.setWordWrap(True)
            layout.addWidget(label)

    def show_for(self, settings: Settings, speakers: bool = False) -> None:
        """``speakers``: the assistant plays on an output device (not only recorded)."""
        cascade = not family(settings.family).full_duplex
        self.label.setVisible(cascade)
        self.headphones.setVisible(speakers)
        self.setVisible(cascade or speakers)


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

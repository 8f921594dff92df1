"""Listen / speak at a glance: a coloured lamp, the state in words, and the user's voice activity.

States come from the engine's period views (``phase`` is ``listen`` or ``speak``) and from the
controller while no period runs (idle, loading, stopping). The voice bar shows the backbone's
voice-activity probability for the last period: what made it listen, answer or stop.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.gui import theme

__all__ = ["StateIndicator"]

_LOOK = {
    "idle": ("Idle", theme.IDLE),
    "loading": ("Loading…", theme.LOADING),
    "stopping": ("Stopping…", theme.IDLE),
    "listen": ("Listening", theme.LISTEN),
    "speak": ("Speaking", theme.SPEAK),
    "running": ("Starting…", theme.LOADING),
}


class StateIndicator(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = "idle"
        self.voice_prob = 0.0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setAccessibleName("conversation state")

    def sizeHint(self) -> QSize:
        return QSize(260, 64)

    @property
    def text(self) -> str:
        return _LOOK.get(self.state, (self.state, theme.IDLE))[0]

    def set_state(self, state: str, voice_prob: float | None = None) -> None:
        """``state``: idle, loading, stopping, running, listen or speak."""
        changed = state != self.state
        self.state = state
        if voice_prob is not None and abs(voice_prob - self.voice_prob) > 1e-3:
            self.voice_prob, changed = max(0.0, min(1.0, voice_prob)), True
        if state in ("idle", "loading", "stopping"):
            changed |= self.voice_prob != 0.0
            self.voice_prob = 0.0
        if changed:
            self.setAccessibleDescription(self.text)
            self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        text, colour = _LOOK.get(self.state, (self.state, theme.IDLE))
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        lamp = QColor(colour)
        glow = QColor(colour)
        glow.setAlpha(60)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(glow)
        painter.drawEllipse(QRectF(2, 6, 30, 30))
        painter.setBrush(lamp)
        painter.drawEllipse(QRectF(9, 13, 16, 16))
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 1.45)
        font.setWeight(QFont.Weight.DemiBold)
        painter.setFont(font)
        painter.setPen(QColor(theme.TEXT))
        painter.drawText(QRectF(44, 4, self.width() - 44, 34), Qt.AlignmentFlag.AlignVCenter, text)
        # voice activity bar
        small = QFont(self.font())
        small.setPointSizeF(small.pointSizeF() * 0.8)
        painter.setFont(small)
        painter.setPen(QColor(theme.TEXT_DIM))
        painter.drawText(QRectF(0, 42, 44, 16), Qt.AlignmentFlag.AlignVCenter, "voice")
        trough = QRectF(44, 46, self.width() - 44 - 40, 8)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(theme.METER_TROUGH))
        painter.drawRoundedRect(trough, 4, 4)
        fill = QRectF(trough.left(), trough.top(), trough.width() * self.voice_prob, 8)
        painter.setBrush(QColor(theme.LISTEN))
        painter.drawRoundedRect(fill, 4, 4)
        painter.setPen(QColor(theme.TEXT_DIM))
        painter.drawText(
            QRectF(self.width() - 36, 42, 36, 16),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            f"{self.voice_prob:.2f}",
        )
        painter.end()

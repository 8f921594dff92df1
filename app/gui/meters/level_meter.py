"""A painted horizontal level meter: dBFS scale, green/amber/red zones, a decaying peak hold.

The window's timer calls :meth:`LevelMeter.set_level` at display rate with the level the engine
side measured; the widget applies :class:`~app.gui.meters.ballistics.Ballistics` and repaints
only when what it shows has moved by a visible amount.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QLinearGradient, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.gui import theme
from app.gui.meters.ballistics import Ballistics

__all__ = ["LevelMeter"]

_TICKS = (-60, -48, -36, -24, -18, -12, -6, -3, 0)


class LevelMeter(QWidget):
    """One channel's meter with a caption (``"Mic"``, ``"Assistant"``) and a numeric readout."""

    def __init__(self, caption: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.caption = caption
        self.ballistics = Ballistics()
        self._shown = (self.ballistics.bar_db, self.ballistics.peak_db)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(180)
        self.setAccessibleName(f"{caption} level meter")

    def sizeHint(self) -> QSize:
        return QSize(260, 46)

    def set_level(self, level_db: float, now: float | None = None) -> None:
        """Feed a level in dBFS; repaints if the bar or the peak moved by 0.25 dB or more."""
        shown = self.ballistics.update(level_db, time.monotonic() if now is None else now)
        if any(abs(a - b) >= 0.25 for a, b in zip(shown, self._shown, strict=True)):
            self._shown = shown
            self.update()

    def reset(self) -> None:
        self.ballistics.reset()
        self._shown = (self.ballistics.bar_db, self.ballistics.peak_db)
        self.update()

    def _x(self, db: float, bar: QRectF) -> float:
        floor = self.ballistics.floor_db
        return bar.left() + bar.width() * (max(floor, min(0.0, db)) - floor) / -floor

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        small = QFont(self.font())
        small.setPointSizeF(max(6.5, small.pointSizeF() * 0.75))
        bar_db, peak_db = self._shown
        caption_h = 16
        bar = QRectF(1, caption_h + 1, self.width() - 2, 14)
        # caption and readout
        painter.setPen(QColor(theme.TEXT))
        painter.drawText(
            QRectF(0, 0, self.width(), caption_h), Qt.AlignmentFlag.AlignLeft, self.caption
        )
        painter.setPen(QColor(theme.TEXT_DIM))
        readout = "—" if peak_db <= self.ballistics.floor_db else f"{peak_db:5.1f} dBFS"
        painter.drawText(
            QRectF(0, 0, self.width(), caption_h), Qt.AlignmentFlag.AlignRight, readout
        )
        # trough
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(theme.METER_TROUGH))
        painter.drawRoundedRect(bar, 3, 3)
        # the bar: one gradient over the whole scale, clipped to the level
        gradient = QLinearGradient(bar.topLeft(), bar.topRight())
        gradient.setColorAt(0.0, QColor(theme.METER_LOW))
        gradient.setColorAt((60 - 18) / 60, QColor(theme.METER_LOW))
        gradient.setColorAt((60 - 9) / 60, QColor(theme.METER_MID))
        gradient.setColorAt((60 - 3) / 60, QColor(theme.METER_HIGH))
        gradient.setColorAt(1.0, QColor(theme.METER_HIGH))
        level_rect = QRectF(bar.left(), bar.top(), self._x(bar_db, bar) - bar.left(), bar.height())
        painter.setBrush(gradient)
        painter.drawRoundedRect(level_rect, 3, 3)
        # peak hold
        if peak_db > self.ballistics.floor_db:
            x = self._x(peak_db, bar)
            painter.setPen(QPen(QColor(theme.METER_PEAK), 2))
            painter.drawLine(int(x), int(bar.top()), int(x), int(bar.bottom()))
        # scale
        painter.setFont(small)
        painter.setPen(QColor(theme.TEXT_DIM))
        for tick in _TICKS:
            x = self._x(tick, bar)
            painter.drawLine(int(x), int(bar.bottom()) + 1, int(x), int(bar.bottom()) + 4)
            label = QRectF(x - 14, bar.bottom() + 3, 28, 12)
            align = Qt.AlignmentFlag.AlignHCenter
            if tick == _TICKS[0]:
                label.moveLeft(bar.left())
                align = Qt.AlignmentFlag.AlignLeft
            elif tick == 0:
                label.moveRight(bar.right())
                align = Qt.AlignmentFlag.AlignRight
            painter.drawText(label, align, str(tick))
        painter.end()

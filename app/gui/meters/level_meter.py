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
_CAPTION_H = 16  # pixels above the bar for the caption and the readout


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
        bar = QRectF(1, _CAPTION_H + 1, self.width() - 2, 14)
        self._paint_caption(painter)
        self._paint_bar(painter, bar)
        self._paint_scale(painter, bar)
        painter.end()

    def _paint_caption(self, painter: QPainter) -> None:
        """The caption on the left, the held peak in dBFS on the right."""
        line = QRectF(0, 0, self.width(), _CAPTION_H)
        painter.setPen(QColor(theme.TEXT))
        painter.drawText(line, Qt.AlignmentFlag.AlignLeft, self.caption)
        peak_db = self._shown[1]
        readout = "—" if peak_db <= self.ballistics.floor_db else f"{peak_db:5.1f} dBFS"
        painter.setPen(QColor(theme.TEXT_DIM))
        painter.drawText(line, Qt.AlignmentFlag.AlignRight, readout)

    def _paint_bar(self, painter: QPainter, bar: QRectF) -> None:
        """The trough, the level over it, and the peak-hold line."""
        bar_db, peak_db = self._shown
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(theme.METER_TROUGH))
        painter.drawRoundedRect(bar, 3, 3)
        # One gradient over the whole scale, clipped to the level: a loud bar shows every zone.
        gradient = QLinearGradient(bar.topLeft(), bar.topRight())
        gradient.setColorAt(0.0, QColor(theme.METER_LOW))
        gradient.setColorAt((60 - 18) / 60, QColor(theme.METER_LOW))
        gradient.setColorAt((60 - 9) / 60, QColor(theme.METER_MID))
        gradient.setColorAt((60 - 3) / 60, QColor(theme.METER_HIGH))
        gradient.setColorAt(1.0, QColor(theme.METER_HIGH))
        level_rect = QRectF(bar.left(), bar.top(), self._x(bar_db, bar) - bar.left(), bar.height())
        painter.setBrush(gradient)
        painter.drawRoundedRect(level_rect, 3, 3)
        if peak_db > self.ballistics.floor_db:
            x = self._x(peak_db, bar)
            painter.setPen(QPen(QColor(theme.METER_PEAK), 2))
            painter.drawLine(int(x), int(bar.top()), int(x), int(bar.bottom()))

    def _paint_scale(self, painter: QPainter, bar: QRectF) -> None:
        """Ticks and their dB labels under the bar; the end labels stay inside the widget."""
        small = QFont(self.font())
        small.setPointSizeF(max(6.5, small.pointSizeF() * 0.75))
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

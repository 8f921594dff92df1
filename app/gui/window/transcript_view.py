"""The conversation, the window's main view: both sides as they are said, a line per turn.

Full height, scrollable (it follows the newest line only while you are at the bottom, so you can
scroll back and read), selectable and copyable (Copy puts the whole transcript on the clipboard).
Lines are appended, never re-set, so a selection survives the periods that arrive meanwhile.
The engine thread keeps the same transcript on disk beside the trace as it grows
(:class:`app.transcript.LiveFile`); the line under the view says where.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.a11y import explain
from app.gui.theme import card_title
from app.gui.words import NO_TEXT, NO_WORDS, TRANSCRIPT_PLACEHOLDER
from app.transcript import Transcript

__all__ = ["TranscriptView"]


class TranscriptView(QFrame):
    """What you and the assistant say, live; a new session starts an empty one."""

    PLACEHOLDER = TRANSCRIPT_PLACEHOLDER

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.transcript = Transcript()
        self._shown = ""  # the text in the view (the transcript's, without the last newline)
        self.view = explain(
            QPlainTextEdit(), "transcript",
            "What was said in this conversation, a line per turn: select and copy any part. "
            "It is saved beside the session's trace as it goes; Export writes it too.",
        )  # fmt: skip
        self.view.setReadOnly(True)
        self.view.setPlaceholderText(self.PLACEHOLDER)
        self.view.setMinimumHeight(120)
        font = self.view.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)  # the conversation reads before the figures
        self.view.setFont(font)
        self.note = QLabel()
        self.note.setObjectName("hint")
        self.note.setWordWrap(True)
        self.copy = explain(
            QPushButton("Copy all"), "copy the transcript",
            "Put the whole transcript on the clipboard (select a part and press Ctrl+C for less).",
        )  # fmt: skip
        self.copy.clicked.connect(self.copy_all)
        self.copy.setEnabled(False)
        foot = QHBoxLayout()
        foot.addWidget(self.note, 1)
        foot.addWidget(self.copy)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 12)
        layout.setSpacing(6)
        layout.addWidget(card_title("Conversation"))
        layout.addWidget(self.view, 1)
        layout.addLayout(foot)

    def add_period(self, t_s: float, heard: str, said: str) -> None:
        """Add one period's two sides (``Transcript.add_period``): "You: …", "Assistant: …"."""
        if not heard.strip() and not said.strip():
            return
        self.transcript.add_period(t_s, heard, said)
        self._show(self.transcript.text().removesuffix("\n"))

    def _show(self, text: str) -> None:
        """Append what is new (lines only grow or are added), keeping the selection; follow the
        end only if the view was at the end."""
        bar = self.view.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 2
        if text.startswith(self._shown):
            cursor = QTextCursor(self.view.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(text[len(self._shown) :])
        else:  # cannot happen for one transcript; a new one starts over
            self.view.setPlainText(text)
        self._shown = text
        self.copy.setEnabled(bool(text))
        if at_end:
            bar.setValue(bar.maximum())

    def saved_to(self, path: Path | None) -> None:
        """Say where the session's transcript is saved as it goes (None: nowhere)."""
        self.note.setText(f"Saved as it goes to {path}" if path else "")
        self.note.setToolTip(str(path or ""))

    def show_model(self, has_text: bool, says_words: bool) -> None:
        """Say what to expect from the running model: no text at all, or random weights' none."""
        if not has_text:
            self.view.setPlaceholderText(NO_TEXT)
        elif not says_words:
            self.view.setPlaceholderText(NO_WORDS)
        else:
            self.view.setPlaceholderText(self.PLACEHOLDER)

    def clear(self) -> None:
        self.transcript = Transcript()
        self._shown = ""
        self.view.clear()
        self.copy.setEnabled(False)

    def copy_all(self) -> None:
        QGuiApplication.clipboard().setText(self.transcript.text())

    def text(self) -> str:
        return self.view.toPlainText() + ("\n" if self._shown else "")

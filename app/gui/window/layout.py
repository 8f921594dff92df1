"""The window's content: the strips on top, the cards on the left, and the main view.

The main view is a pair of tabs: the conversation (the transcript, full height) first, the
engine's charts a tab away (Ctrl+1, Ctrl+2). Wide, the cards stand beside the tabs; narrow
(under ``NARROW_PX``), the cards stand above them and the page scrolls, so neither a chart nor
the transcript is ever cut or squashed below a readable height.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QSplitter, QTabWidget, QVBoxLayout, QWidget

from app.gui.a11y import explain
from app.gui.live.panel import LivePanel
from app.gui.window.banners import CascadeNote, ErrorStrip, SyntheticBanner
from app.gui.window.cards import ConversationCard, SessionCard
from app.gui.window.transcript_view import TranscriptView

__all__ = ["CHARTS_MIN_H", "NARROW_PX", "MainView"]

NARROW_PX = 1000  # content narrower than this puts the main view under the cards
CHARTS_MIN_H = 720  # the charts' least height when stacked (the page scrolls instead)
SPLIT = [360, 1000]  # the cards' and the main view's widths, wide


def _scroller(widget: QWidget) -> QScrollArea:
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # it scrolls to the focus itself
    area.setWidget(widget)
    return area


class MainView(QScrollArea):
    """Everything under the toolbar; the window reaches its parts by name."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.banner = SyntheticBanner()
        self.cascade_note = CascadeNote()
        self.error_strip = ErrorStrip()
        self.conversation = ConversationCard()
        self.session_card = SessionCard()
        self.transcript = TranscriptView()
        self.panel = LivePanel()
        left = self.left_column = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(8)
        column.addWidget(self.conversation)
        column.addWidget(self.panel.summary)
        column.addWidget(self.session_card)
        column.addStretch(1)
        left.setMinimumWidth(290)
        # Wide: the cards scroll on their own and the main view keeps the window's height.
        self.left_scroll = _scroller(left)
        self.left_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.left_scroll.setMinimumWidth(300)
        self.tabs = explain(
            QTabWidget(), "main view",
            "The conversation (Ctrl+1) or the engine's charts (Ctrl+2); the arrow keys switch.",
        )  # fmt: skip
        self.tabs.setDocumentMode(True)
        self.tabs.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Tab reaches its bar instead
        explain(
            self.tabs.tabBar(), "conversation or charts",
            "Show the conversation (Ctrl+1) or the engine's charts (Ctrl+2).",
        )  # fmt: skip
        self.tabs.addTab(self.transcript, "Conversation")
        self.tabs.addTab(self.panel, "Engine")
        self.tabs.setTabToolTip(0, "What you and the assistant say (Ctrl+1)")
        self.tabs.setTabToolTip(1, "How the engine runs the model, period by period (Ctrl+2)")
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.left_scroll)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes(SPLIT)
        content = self.content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.setSpacing(8)
        layout.addWidget(self.banner)
        layout.addWidget(self.cascade_note)
        layout.addWidget(self.error_strip)
        layout.addWidget(self.splitter, 1)
        # Below the content's minimum the window scrolls instead of cutting or squashing it.
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setWidget(content)

    def show_charts(self) -> None:
        self.tabs.setCurrentWidget(self.panel)

    def show_conversation(self) -> None:
        self.tabs.setCurrentWidget(self.transcript)

    def reset_split(self) -> None:
        self.splitter.setSizes(SPLIT)

    def reflow(self, width: int) -> None:
        """Wide: the cards beside the main view. Narrow: above it, and the page scrolls."""
        narrow = width < NARROW_PX  # the window's own width: its layout may lag
        orientation = Qt.Orientation.Vertical if narrow else Qt.Orientation.Horizontal
        if self.splitter.orientation() != orientation:
            self.splitter.setOrientation(orientation)
            if narrow:
                self.splitter.setSizes([self.left_column.sizeHint().height(), CHARTS_MIN_H])
            else:
                self.splitter.setSizes(SPLIT)
        cards = self.left_column.sizeHint().height()
        self.left_scroll.setMinimumHeight(cards if narrow else 0)  # stacked: no inner scroll
        self.content.setMinimumHeight(cards + CHARTS_MIN_H + 40 if narrow else 0)
        self.tabs.setMinimumHeight(CHARTS_MIN_H if narrow else 0)

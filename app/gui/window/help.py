"""The Help page (F1): the app in a person's words, from app.gui.words."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

from app.gui.a11y import explain
from app.gui.words import HELP_HTML

__all__ = ["HelpDialog"]


class HelpDialog(QDialog):
    """A non-modal page the user can keep open beside the window."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("DuplexCadence Help")
        self.browser = explain(
            QTextBrowser(), "help text", "How to talk with the assistant and read the charts."
        )
        self.browser.setOpenExternalLinks(True)
        self.browser.setHtml(HELP_HTML)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.browser, 1)
        layout.addWidget(buttons)
        self.resize(640, 620)

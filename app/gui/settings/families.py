"""The Models page's table: every family, installed or not, where, its size and what it needs,
with a Download button where a public checkpoint exists (``app.gui.settings.inventory``)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QAbstractItemView, QPushButton, QTableWidget, QTableWidgetItem

from app.gui.a11y import explain
from app.gui.settings.checkpoints import PublicCheckpoint
from app.gui.settings.inventory import FamilyRow, family_rows
from app.settings import Settings
from engine.sizes import byte_text

__all__ = ["FamiliesTable"]

COLUMNS = ("Model", "Installed", "Where", "On disk", "Needs", "")
INSTALLED_WITH_APP = "installed with the app"  # packages in the app's Python, not a folder of yours


def where_text(folders: tuple[Path, ...]) -> str:
    """Folders as the user knows them: a checkpoint's path; the app's own Python packages are
    "installed with the app", never a ``site-packages`` path."""
    shown: list[str] = []
    for folder in folders:
        parts = set(folder.parts)
        text = INSTALLED_WITH_APP if parts & {"site-packages", "dist-packages"} else str(folder)
        if text not in shown:
            shown.append(text)
    return "\n".join(shown) or "—"


class FamiliesTable(QTableWidget):
    """One row per family; ``download(PublicCheckpoint)`` when a row's button is pressed."""

    download = Signal(object)

    def __init__(self, settings: Settings) -> None:
        super().__init__(0, len(COLUMNS))
        self.settings = settings
        self.rows: list[FamilyRow] = []
        self.buttons: dict[str, QPushButton] = {}  # family key -> its Download button
        self.setHorizontalHeaderLabels(COLUMNS)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setWordWrap(True)
        self.verticalHeader().hide()
        self.horizontalHeader().setStretchLastSection(False)
        for column, width in enumerate((210, 150, 170, 70, 260, 100)):
            self.setColumnWidth(column, width)
        explain(
            self, "model families",
            "Every model family the app can run: whether it is installed, where its files are, "
            "their size on disk, and what it needs to run.",
        )  # fmt: skip

    def refresh(self, models_dir: Path) -> None:
        """List the families again (after a download, or another models folder)."""
        self.rows = family_rows(self.settings, models_dir)
        self.buttons.clear()
        self.setRowCount(len(self.rows))
        for index, row in enumerate(self.rows):
            cells = (
                row.title,
                "yes" if row.installed else f"no — {row.status}",
                where_text(row.where),
                byte_text(row.size_bytes) if row.where else "—",
                row.needs,
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.setItem(index, column, item)
            if row.download is not None:
                self.setCellWidget(index, len(cells), self._button(row.key, row.download))
        self.resizeRowsToContents()
        # Every row in view at the dialog's default size: the table is as tall as its rows.
        rows = sum(self.rowHeight(i) for i in range(self.rowCount()))
        header = self.horizontalHeader().sizeHint().height()
        scroll = self.horizontalScrollBar().sizeHint().height()  # should the columns overflow
        self.setMinimumHeight(header + rows + scroll + 2 * self.frameWidth() + 2)

    def _button(self, key: str, checkpoint: PublicCheckpoint) -> QPushButton:
        button = explain(
            QPushButton("Download"), f"download {checkpoint.repo_id}",
            f"Download {checkpoint.repo_id} ({checkpoint.needs}) into the folder below.",
        )  # fmt: skip
        button.clicked.connect(lambda: self.download.emit(checkpoint))
        self.buttons[key] = button
        return button

    def family_row(self, key: str) -> FamilyRow:
        return next(row for row in self.rows if row.key == key)

    def set_busy(self, busy: bool) -> None:
        """One download at a time: the buttons rest while one runs."""
        for button in self.buttons.values():
            button.setEnabled(not busy)

"""The Models page (Settings > Checkpoint folder > Models…): every family, and downloads.

A table lists every family of the registry (:mod:`app.gui.settings.families`): installed or not,
where, its size on disk and what it needs. Below it, a public checkpoint
(:data:`~app.gui.settings.download.PUBLIC_CHECKPOINTS`: Moshi, MiniCPM-o 4.5, its voice) and a
folder; nothing is downloaded until the user presses Download (in a row, or below), with a
progress bar and Cancel. A finished download hands back its family (``family_chosen``) and its
checkpoint folder (``chosen``) for the settings' fields, and the table is listed again.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.gui import theme
from app.gui.a11y import explain
from app.gui.settings.download import PUBLIC_CHECKPOINTS, CheckpointDownload, PublicCheckpoint
from app.gui.settings.families import FamiliesTable
from app.settings import Settings

__all__ = ["ModelsDialog", "default_models_dir"]


def default_models_dir() -> Path:
    """``<user data dir>/duplexcadence/models``."""
    return Path(platformdirs.user_data_dir("duplexcadence")) / "models"


class ModelsDialog(QDialog):
    """Every family; choose a public checkpoint and a folder, download it; ``family_chosen(str)``
    then ``chosen(str)`` on success. ``settings``: what the table says is configured."""

    chosen = Signal(str)
    family_chosen = Signal(str)

    def __init__(
        self,
        endpoint: str | None = None,
        parent: QWidget | None = None,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.setMinimumWidth(980)
        self.table = FamiliesTable(settings or Settings())
        self.table.download.connect(self._download)
        self.endpoint = endpoint
        self.job: CheckpointDownload | None = None
        self.model = explain(QComboBox(), "checkpoint to download", "A public checkpoint.")
        for checkpoint in PUBLIC_CHECKPOINTS:
            self.model.addItem(checkpoint.title, checkpoint)
        self.needs = QLabel()
        self.needs.setObjectName("hint")
        self.needs.setWordWrap(True)
        self.model.currentIndexChanged.connect(self._show_needs)
        self.folder = explain(
            QLineEdit(str(default_models_dir())), "download folder",
            "Where the checkpoint goes; a download stopped halfway keeps its whole files here.",
        )  # fmt: skip
        self.folder.editingFinished.connect(self.refresh)
        browse = explain(
            QPushButton("Browse…"), "browse for the download folder", "Choose the folder."
        )
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.folder, 1)
        row.addWidget(browse)
        self.bar = explain(QProgressBar(), "download progress", "Bytes downloaded so far.")
        self.bar.setRange(0, 0)
        self.bar.hide()
        self.status = QLabel("Nothing is downloaded until you press Download.")
        self.status.setObjectName("hint")
        self.status.setWordWrap(True)
        self.download = explain(
            QPushButton("Download"), "download", "Download the checkpoint from the hub."
        )
        self.download.clicked.connect(self.start)
        self.cancel = explain(
            QPushButton("Cancel download"), "cancel the download",
            "Stop; the files that came down whole stay, and the next download skips them.",
        )  # fmt: skip
        self.cancel.setEnabled(False)
        self.cancel.clicked.connect(self.stop)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        form = QFormLayout()
        form.addRow("Checkpoint", self.model)
        form.addRow("", self.needs)
        form.addRow("Folder", row)
        actions = QHBoxLayout()
        actions.addWidget(self.download)
        actions.addWidget(self.cancel)
        actions.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addLayout(form)
        layout.addWidget(self.bar)
        layout.addWidget(self.status)
        layout.addLayout(actions)
        layout.addWidget(buttons)
        self._show_needs()
        self.refresh()

    def refresh(self) -> None:
        """List the families again, against the folder now in the field."""
        self.table.refresh(self._models_dir())

    def _models_dir(self) -> Path:
        return Path(self.folder.text().strip()).expanduser()

    def _download(self, checkpoint: PublicCheckpoint) -> None:
        """A row's Download: that checkpoint, into the folder below."""
        self.model.setCurrentIndex(PUBLIC_CHECKPOINTS.index(checkpoint))
        self.start()

    def _show_needs(self) -> None:
        checkpoint = self.model.currentData()
        self.needs.setText(f"{checkpoint.repo_id}: {checkpoint.needs}.")

    def _browse(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Download into", self.folder.text())
        if chosen:
            self.folder.setText(chosen)

    def start(self) -> None:
        """Download the chosen checkpoint into the folder (a thread of its own)."""
        if self.job is not None:
            return
        checkpoint = self.model.currentData()
        folder = self._models_dir() / checkpoint.folder_name
        job = CheckpointDownload(checkpoint, folder, self.endpoint, parent=self)
        job.progress.connect(self._progress)
        job.done.connect(self._done)
        job.failed.connect(self._failed)
        job.cancelled.connect(self._cancelled)
        job.finished.connect(self._finished)
        self.job = job
        self.download.setEnabled(False)
        self.table.set_busy(True)
        self.cancel.setEnabled(True)
        self.bar.setRange(0, 0)
        self.bar.show()
        self.status.setStyleSheet("")
        self.status.setText(f"Downloading {checkpoint.repo_id} into {folder}…")
        job.start()

    def stop(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.status.setText("Cancelling after the chunk in flight…")

    def _progress(self, done: int, total: int) -> None:
        if total > 0:
            self.bar.setRange(0, 1000)
            self.bar.setValue(round(1000 * min(1.0, done / total)))
            self.bar.setFormat(f"{done / 2**20:.1f} of {total / 2**20:.1f} MiB")

    def _done(self, folder: str) -> None:
        self.bar.setRange(0, 1000)
        self.bar.setValue(1000)
        self.status.setText(f"Downloaded: {folder} is the checkpoint folder now.")
        if self.job is not None:
            self.family_chosen.emit(self.job.checkpoint.family)
        self.chosen.emit(folder)
        self.refresh()

    def _failed(self, message: str) -> None:
        self.status.setStyleSheet(f"color: {theme.ERROR};")
        self.status.setText(message)

    def _cancelled(self) -> None:
        self.status.setText("Cancelled; the whole files stay and Download fetches the rest.")

    def _finished(self) -> None:
        self.job = None
        self.download.setEnabled(True)
        self.table.set_busy(False)
        self.cancel.setEnabled(False)

    def reject(self) -> None:
        """Closing cancels a running download (and waits for it to stop)."""
        if self.job is not None:
            self.job.cancel()
            self.job.wait(10_000)
        super().reject()

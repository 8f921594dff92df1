"""The Models page (Settings > Checkpoint folder > Models…): every family, and downloads.

A table lists every family of the registry (:mod:`app.gui.settings.families`): installed or not,
where, its size on disk and what it needs. Below it, a public checkpoint
(:data:`~app.gui.settings.download.PUBLIC_CHECKPOINTS`: Moshi, MiniCPM-o 4.5, its voice) and a
folder; nothing is downloaded until the user presses Download (in a row, or below). Download
first asks the hub what comes down (:mod:`app.gui.settings.plan`) and checks it: a disk that
cannot hold it refuses in one sentence; a model that needs a GPU this computer lacks asks for a
second press ("Download anyway"). Then a progress bar that counts the bytes against that size,
and Cancel; a failure or a cancel stops the bar and says what happened in one sentence. A
finished download hands back its family (``family_chosen``) and its checkpoint folder
(``chosen``) for the settings' fields, and the table is listed again.
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
from app.gui.settings.checkpoints import PUBLIC_CHECKPOINTS, PublicCheckpoint
from app.gui.settings.devices import cuda_present
from app.gui.settings.download import CheckpointDownload, PlanJob
from app.gui.settings.families import FamiliesTable
from app.gui.settings.plan import DownloadPlan, size_text
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
        self.planning: PlanJob | None = None
        self.pending: DownloadPlan | None = None  # planned, waiting for "Download anyway"
        self.model = explain(QComboBox(), "checkpoint to download", "A public checkpoint.")
        for checkpoint in PUBLIC_CHECKPOINTS:
            self.model.addItem(checkpoint.title, checkpoint)
        self.needs = QLabel()
        self.needs.setObjectName("hint")
        self.needs.setWordWrap(True)
        self.model.currentIndexChanged.connect(self._show_needs)
        self.model.currentIndexChanged.connect(self._forget_plan)
        self.folder = explain(
            QLineEdit(str(default_models_dir())), "download folder",
            "Where the checkpoint goes; a download stopped halfway keeps its whole files here.",
        )  # fmt: skip
        self.folder.editingFinished.connect(self.refresh)
        self.folder.textChanged.connect(self._forget_plan)
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
        self.resize(self.width(), max(self.height(), self.sizeHint().height()))

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

    def _forget_plan(self) -> None:
        """Another checkpoint or folder: a plan waiting for "Download anyway" no longer holds."""
        if self.pending is not None:
            self.pending = None
            self.download.setText("Download")
            self._say("Nothing is downloaded until you press Download.")

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setStyleSheet(f"color: {theme.ERROR};" if error else "")
        self.status.setText(text)

    def _busy(self, busy: bool) -> None:
        self.download.setEnabled(not busy)
        self.table.set_busy(busy)

    def start(self) -> None:
        """Ask the hub what comes down and check it; then download (threads of their own)."""
        if self.job is not None or self.planning is not None:
            return
        checkpoint = self.model.currentData()
        folder = self._models_dir() / checkpoint.folder_name
        pending = self.pending
        if pending is not None and (pending.checkpoint, pending.folder) == (checkpoint, folder):
            self._begin(pending)  # the second press: "Download anyway"
            return
        self._forget_plan()
        planning = PlanJob(checkpoint, folder, self.endpoint, parent=self)
        planning.planned.connect(self._planned)
        planning.failed.connect(self._failed)
        planning.finished.connect(lambda: setattr(self, "planning", None))
        planning.finished.connect(lambda: self._busy(self.job is not None))
        self.planning = planning
        self._busy(True)
        self.bar.setRange(0, 0)  # busy while the hub answers
        self.bar.show()
        self._say(f"Asking the hub what {checkpoint.repo_id} holds…")
        planning.start()

    def _planned(self, plan: DownloadPlan) -> None:
        """The hub answered: refuse what the disk cannot hold, ask once for a missing GPU."""
        problem = plan.disk_problem()
        if problem is not None:
            self.bar.hide()
            self._say(problem, error=True)
            return
        if plan.checkpoint.gpu and plan.to_fetch and not cuda_present():
            self.bar.hide()
            self.pending = plan
            self.download.setText(f"Download {size_text(plan.to_fetch)} anyway")
            self._say(
                f"{plan.summary()}. It needs a CUDA GPU to run in real time and this computer "
                "has none: press Download anyway to fetch it all the same."
            )
            return
        self._begin(plan)

    def _begin(self, plan: DownloadPlan) -> None:
        """Download what ``plan`` says into its folder."""
        checkpoint, folder = plan.checkpoint, plan.folder
        self.pending = None
        self.download.setText("Download")
        job = CheckpointDownload(checkpoint, folder, self.endpoint, parent=self, plan=plan)
        job.progress.connect(self._progress)
        job.done.connect(self._done)
        job.failed.connect(self._failed)
        job.cancelled.connect(self._cancelled)
        job.finished.connect(self._finished)
        self.job = job
        self._busy(True)
        self.cancel.setEnabled(True)
        self.bar.setRange(0, 1000)
        self.bar.setValue(0)
        self.bar.setFormat(f"0 of {size_text(plan.to_fetch)}")
        self.bar.show()
        self._say(f"Downloading {size_text(plan.to_fetch)} of {checkpoint.repo_id} into {folder}…")
        job.start()

    def stop(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.status.setText("Cancelling after the chunk in flight…")

    def _progress(self, done: int, total: int) -> None:
        if total > 0:
            self.bar.setValue(round(1000 * min(1.0, done / total)))
            self.bar.setFormat(f"{size_text(done)} of {size_text(total)}")

    def _done(self, folder: str) -> None:
        self.bar.setRange(0, 1000)
        self.bar.setValue(1000)
        self._say(f"Downloaded: {folder} is the checkpoint folder now.")
        if self.job is not None:
            self.family_chosen.emit(self.job.checkpoint.family)
        self.chosen.emit(folder)
        self.refresh()

    def _failed(self, message: str) -> None:
        """One sentence, and the bar stops: nothing moves once nothing is coming."""
        self.bar.hide()
        self._say(message, error=True)

    def _cancelled(self) -> None:
        self.bar.hide()
        self._say("Cancelled; the whole files stay and Download fetches the rest.")

    def _finished(self) -> None:
        self.job = None
        self._busy(self.planning is not None)
        self.cancel.setEnabled(False)

    def reject(self) -> None:
        """Closing cancels a running download (and waits for it to stop)."""
        if self.job is not None:
            self.job.cancel()
            self.job.wait(10_000)
        if self.planning is not None:
            self.planning.wait(30_000)  # the hub's answer (its own timeout bounds it)
        super().reject()

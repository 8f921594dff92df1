"""The window's export flow: the dialog, the pool job, and what the user is told.

Holds every job until it reports: a ``QRunnable``'s signal object must outlive ``run()`` for
its queued signals to arrive. The engine thread is never involved: the job reads the trace file
and snapshots the recorder on its own thread.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QStandardPaths, Signal
from PySide6.QtWidgets import QWidget

from app.gui.export.dialog import ExportDialog
from app.gui.export.job import ExportJob, start_export
from app.gui.export.writers import ExportKind
from app.gui.worker.controller import EngineController

__all__ = ["ExportFlow"]


class ExportFlow(QObject):
    """``open_dialog`` asks where and what; ``export_to`` writes; ``done``/``failed`` report."""

    started = Signal(str)  # the folder
    done = Signal(list)  # paths written
    failed = Signal(str)  # a message naming the fix

    def __init__(
        self, controller: EngineController, folder: Path | None, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self.folder = folder
        self._jobs: list[ExportJob] = []

    def default_folder(self) -> Path:
        """The last folder used, else Documents, else home."""
        if self.folder is not None:
            return self.folder
        docs = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
        return Path(docs) if docs and Path(docs).is_dir() else Path.home()

    def open_dialog(self, parent: QWidget | None) -> ExportDialog:
        """The export dialog (window-modal, non-blocking); Export starts the job."""
        trace, recorder = self.controller.trace, self.controller.recorder
        transcript = self.controller.transcript
        dialog = ExportDialog(
            self.default_folder(),
            trace.stem if trace is not None else "session",
            has_trace=trace is not None and trace.is_file(),
            has_audio=recorder is not None,
            has_transcript=transcript is not None and bool(transcript.lines()),
            parent=parent,
        )
        dialog.accepted.connect(lambda: self.export_to(*dialog.selection()))
        dialog.open()
        return dialog

    def export_to(self, folder: Path, stem: str, kinds: list[ExportKind]) -> None:
        """Write the selected files on a pool thread (the conversation goes on)."""
        self.folder = folder
        c = self.controller
        job = ExportJob(folder, stem, kinds, c.trace, c.recorder, c.transcript)
        job.setAutoDelete(False)
        job.signals.done.connect(self._done)
        job.signals.failed.connect(self._failed)
        self._jobs.append(job)
        self.started.emit(str(folder))
        start_export(job)

    def _forget_sender(self) -> None:
        sender = self.sender()
        self._jobs = [job for job in self._jobs if job.signals is not sender]

    def _done(self, paths: list[str]) -> None:
        self._forget_sender()
        self.done.emit(paths)

    def _failed(self, message: str) -> None:
        self._forget_sender()
        self.failed.emit(message)

"""Run an export on a pool thread: neither the GUI nor the engine thread waits for the disk.

The job snapshots the recorder (microseconds under its lock) when it runs, then reads the trace,
concatenates audio and writes files on its own thread; ``done``/``failed`` arrive on the GUI
thread as queued signals.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from app.gui.export.writers import ExportKind, export_session
from app.gui.worker.recorder import AudioRecorder
from app.transcript import Transcript

__all__ = ["ExportJob", "start_export"]


class _Signals(QObject):
    done = Signal(list)  # [str] paths written
    failed = Signal(str)  # a message naming the fix


class ExportJob(QRunnable):
    """One export of the selected kinds to ``folder/stem*``."""

    def __init__(
        self,
        folder: Path,
        stem: str,
        kinds: Iterable[ExportKind],
        trace: Path | None,
        recorder: AudioRecorder | None,
        transcript: Transcript | None = None,
    ) -> None:
        super().__init__()
        self.signals = _Signals()
        self._args = (folder, stem, tuple(kinds))
        self._trace, self._recorder, self._transcript = trace, recorder, transcript

    def run(self) -> None:
        folder, stem, kinds = self._args
        try:
            channels = self._recorder.snapshot() if self._recorder is not None else None
            said = self._transcript.text() if self._transcript is not None else None
            paths = export_session(
                folder, stem, kinds, trace=self._trace, channels=channels, transcript=said
            )
        except Exception as exc:  # the user sees every failure; the conversation goes on
            traceback.print_exc()
            self.signals.failed.emit(f"export failed: {exc}")
            return
        self.signals.done.emit([str(p) for p in paths])


def start_export(job: ExportJob, pool: QThreadPool | None = None) -> None:
    """Queue the job on ``pool`` (the global pool by default)."""
    (pool or QThreadPool.globalInstance()).start(job)

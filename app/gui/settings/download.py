"""Download a public checkpoint through ``huggingface_hub``, only when the user asks.

:class:`CheckpointDownload` runs ``snapshot_download`` on a thread of its own (the GUI thread
never waits for the network) into a folder the user chose, reporting bytes as they arrive;
:meth:`~CheckpointDownload.cancel` stops it at the next chunk. A later download of the same
repository into the same folder resumes file by file: the files that came down whole are kept
and checked against the hub, not fetched again (huggingface_hub 2.x restarts a file it was
cut off in the middle of). ``endpoint`` is the hub's address (None: huggingface.co; the tests
serve a tiny repository from a loopback server).
"""

from __future__ import annotations

import io
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal

from app.gui.settings.checkpoints import PUBLIC_CHECKPOINTS, PublicCheckpoint
from app.gui.settings.plan import DownloadPlan, hub_sentence, plan_download

__all__ = ["PUBLIC_CHECKPOINTS", "CheckpointDownload", "PlanJob", "PublicCheckpoint"]


class DownloadCancelled(Exception):
    """Raised inside the download when the user cancels it."""


def _progress_class(report: Callable[[int], None], cancelled: threading.Event) -> type:
    """A tqdm class that reports the bytes come down so far and stops the download on cancel."""
    from tqdm import tqdm

    seen: dict[int, int] = {}  # each byte bar's count

    class _Progress(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)  # the hub names its bars; tqdm has no such argument
            kwargs["file"] = io.StringIO()  # drawn in the dialog, not on the terminal
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if cancelled.is_set():
                raise DownloadCancelled
            result: bool | None = super().update(n)
            if self.unit == "B" and n:  # the bytes written, and beside them the bytes received:
                seen[id(self)] = int(self.n)  # the same download twice, so the larger counts
                report(max(seen.values()))
            return result

    return _Progress


class PlanJob(QThread):
    """:func:`~app.gui.settings.plan.plan_download` off the GUI thread: ``planned(plan)`` or
    ``failed(sentence)``. ``plan`` is what :class:`CheckpointDownload` counts against."""

    planned = Signal(object)  # DownloadPlan
    failed = Signal(str)

    def __init__(
        self,
        checkpoint: PublicCheckpoint,
        folder: Path,
        endpoint: str | None = None,
        parent: QObject | None = None,
        plan: DownloadPlan | None = None,
    ) -> None:
        super().__init__(parent)
        self.checkpoint, self.folder, self.endpoint = checkpoint, folder, endpoint
        self.plan = plan

    def run(self) -> None:
        try:
            plan = plan_download(self.checkpoint, self.folder, self.endpoint)
        except Exception as error:  # the network, the hub: one sentence; details to the terminal
            traceback.print_exc()
            self.failed.emit(hub_sentence(error, self.checkpoint.repo_id, self.folder))
            return
        self.planned.emit(plan)


class CheckpointDownload(PlanJob):
    """``snapshot_download(repo_id)`` into ``folder``; see the module doc. ``plan``: what the
    hub said comes down (the progress counts against it)."""

    progress = Signal(int, int)  # bytes so far, bytes in all (0 while unknown)
    done = Signal(str)  # the checkpoint folder inside ``folder``
    failed = Signal(str)  # what went wrong and the fix
    cancelled = Signal()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received = 0  # bytes come down in this download
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Stop at the next chunk (any thread); whole files stay for a later download."""
        self._cancel.set()

    def run(self) -> None:
        from huggingface_hub import constants, snapshot_download

        progress = _progress_class(self._received, self._cancel)
        # A model family may keep the hub off for its loading (MiniCPM-o's checkpoint code runs
        # with HF_HUB_OFFLINE set); a download the user asked for is the one call that goes out.
        constants.HF_HUB_OFFLINE = False
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            snapshot_download(
                self.checkpoint.repo_id,
                local_dir=self.folder,
                allow_patterns=list(self.checkpoint.patterns),
                endpoint=self.endpoint,
                tqdm_class=progress,
                max_workers=2,
            )
        except DownloadCancelled:
            self.cancelled.emit()
            return
        except Exception as error:  # the network, the disk, the hub: the user sees each
            if self._cancel.is_set():
                self.cancelled.emit()
                return
            traceback.print_exc()
            self.failed.emit(hub_sentence(error, self.checkpoint.repo_id, self.folder))
            return
        self.done.emit(str(self.checkpoint.checkpoint_in(self.folder)))

    def _received(self, n: int) -> None:
        self.received = n
        total = self.plan.to_fetch if self.plan is not None else 0
        self.progress.emit(self.received, max(total, self.received) if total else 0)

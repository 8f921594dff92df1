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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal

from adapters.moshi.config import MIMI_FILE, MOSHI_FILE, TOKENIZER_FILE

__all__ = ["PUBLIC_CHECKPOINTS", "CheckpointDownload", "PublicCheckpoint"]


@dataclass(frozen=True)
class PublicCheckpoint:
    """A checkpoint a user may download: its hub repository and the files the app needs."""

    title: str
    repo_id: str
    patterns: tuple[str, ...]  # allow_patterns: only these files come down
    subfolder: str  # the checkpoint folder inside the download (Settings points at it)
    needs: str  # what comes down, in words
    family: str  # the family (adapters.registry key) that loads it

    @property
    def folder_name(self) -> str:
        """The download's folder inside the models folder: the repository's name."""
        return self.repo_id.split("/")[-1]


PUBLIC_CHECKPOINTS = (
    PublicCheckpoint(
        "MiniCPM-o 4.5 voice (Token2Wav)", "openbmb/MiniCPM-o-4_5",
        ("assets/token2wav/*",), "assets/token2wav",
        "its flow and vocoder (flow.yaml, flow.pt, hift_original.pt); real time needs a GPU",
        "synthetic",
    ),
    PublicCheckpoint(
        "Moshi (Kyutai) 7B", "kyutai/moshiko-pytorch-bf16",
        (MOSHI_FILE, MIMI_FILE, TOKENIZER_FILE), "",
        "the 7B in bf16, its Mimi codec and its text tokenizer", "moshi",
    ),
    PublicCheckpoint(
        "MiniCPM-o 4.5, the whole model", "openbmb/MiniCPM-o-4_5", ("*",), "",
        "the whole checkpoint: its weights, its own code and the Token2Wav voice", "minicpmo45",
    ),
)  # fmt: skip


class DownloadCancelled(Exception):
    """Raised inside the download when the user cancels it."""


def _progress_class(report: Callable[[int, int], None], cancelled: threading.Event) -> type:
    """A tqdm class that reports the hub's byte counts and stops the download on cancel."""
    from tqdm import tqdm

    class _Progress(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)  # the hub names its bars; tqdm has no such argument
            kwargs["file"] = io.StringIO()  # drawn in the dialog, not on the terminal
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if cancelled.is_set():
                raise DownloadCancelled
            result: bool | None = super().update(n)
            if self.unit == "B":
                report(int(self.n), int(self.total or 0))
            return result

    return _Progress


class CheckpointDownload(QThread):
    """``snapshot_download(repo_id)`` into ``folder``; see the module doc."""

    progress = Signal(int, int)  # bytes so far, bytes in all (0 while unknown)
    done = Signal(str)  # the checkpoint folder inside ``folder``
    failed = Signal(str)  # what went wrong and the fix
    cancelled = Signal()

    def __init__(
        self,
        checkpoint: PublicCheckpoint,
        folder: Path,
        endpoint: str | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.checkpoint, self.folder, self.endpoint = checkpoint, folder, endpoint
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Stop at the next chunk (any thread); whole files stay for a later download."""
        self._cancel.set()

    def run(self) -> None:
        from huggingface_hub import constants, snapshot_download

        progress = _progress_class(self.progress.emit, self._cancel)
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
            self.failed.emit(
                f"Downloading {self.checkpoint.repo_id} failed ({error}): check the connection "
                f"and that {self.folder} is writable, then download again (whole files are kept)."
            )
            return
        self.done.emit(str(self.folder / self.checkpoint.subfolder))

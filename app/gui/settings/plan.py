"""Before a download starts: how much comes down, whether the disk holds it, whether this
computer has the GPU the model needs, and the hub's or the network's trouble in one sentence.

:func:`plan_download` asks the hub for the sizes of the files the checkpoint's patterns select
(``HfApi.list_repo_tree``: the hub's numbers, never typed here), subtracts the files already
whole in the folder, and reads the free space of the folder's disk. No Qt; torch-free.
"""

from __future__ import annotations

import errno
import fnmatch
import shutil
from dataclasses import dataclass
from pathlib import Path

from app.gui.settings.checkpoints import PublicCheckpoint
from engine.sizes import GIB, UNITS, byte_text

__all__ = ["DISK_MARGIN", "DownloadPlan", "hub_sentence", "plan_download", "size_text"]

DISK_MARGIN = GIB  # left free on the disk after the download


def size_text(n: int) -> str:
    """Bytes as people read a download's size: 15.8 GB, 386 MB, 12 kB (powers of ten)."""
    for unit in ("GB", "MB", "kB"):
        if n >= UNITS[unit]:
            return byte_text(n, unit, 1 if n < 100 * UNITS[unit] else 0)
    return f"{n} bytes"


@dataclass(frozen=True)
class DownloadPlan:
    """What a download of ``checkpoint`` into ``folder`` takes."""

    checkpoint: PublicCheckpoint
    folder: Path
    files: dict[str, int]  # the files the patterns select: path in the repository -> bytes
    have: int  # bytes of them already whole in the folder (not fetched again)
    free: int  # free bytes on the folder's disk

    @property
    def total(self) -> int:
        return sum(self.files.values())

    @property
    def to_fetch(self) -> int:
        return self.total - self.have

    def disk_problem(self) -> str | None:
        """One sentence when the disk cannot hold the download (with a margin), else None."""
        if self.to_fetch + DISK_MARGIN <= self.free:
            return None
        return (
            f"{self.checkpoint.title} needs {size_text(self.to_fetch)} and {self.folder} has "
            f"{size_text(self.free)} free: free some space or choose a folder on another disk."
        )

    def summary(self) -> str:
        kept = f", {size_text(self.have)} already here" if self.have else ""
        return (
            f"{self.checkpoint.title}: {size_text(self.to_fetch)} to download{kept} "
            f"({len(self.files)} files), {size_text(self.free)} free on its disk"
        )


def _free_bytes(folder: Path) -> int:
    """Free space where ``folder`` is (or will be: its nearest existing parent)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def plan_download(
    checkpoint: PublicCheckpoint, folder: Path, endpoint: str | None = None
) -> DownloadPlan:
    """Ask the hub (see the module doc); raises what the hub raises (:func:`hub_sentence`)."""
    from huggingface_hub import HfApi, RepoFile, constants

    constants.HF_HUB_OFFLINE = False  # as CheckpointDownload: the user asked for this call
    entries = HfApi(endpoint=endpoint).list_repo_tree(checkpoint.repo_id, recursive=True)
    files = {
        entry.path: int(entry.size)
        for entry in entries
        if isinstance(entry, RepoFile)
        and any(fnmatch.fnmatch(entry.path, p) for p in checkpoint.patterns)
    }
    have = sum(
        size for name, size in files.items()
        if (folder / name).is_file() and (folder / name).stat().st_size == size
    )  # fmt: skip
    return DownloadPlan(checkpoint, folder, files, have, _free_bytes(folder))


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def hub_sentence(error: BaseException, repo_id: str, folder: Path) -> str:
    """The trouble behind ``error`` in one plain sentence that names the fix (the hub's own
    text, often a page of it, goes to the terminal only)."""
    from huggingface_hub import errors

    for cause in _chain(error):
        if isinstance(cause, errors.OfflineModeIsEnabled):
            return "Downloads are switched off (HF_HUB_OFFLINE is set): unset it and try again."
        if isinstance(cause, errors.GatedRepoError):
            return (
                f"{repo_id} asks you to accept its terms on huggingface.co first: accept them, "
                "log in with 'hf auth login', and download again."
            )
        if isinstance(cause, errors.RepositoryNotFoundError):
            return f"The hub has no {repo_id} (or it is private): check the name and your login."
        if isinstance(cause, errors.HfHubHTTPError):
            status = getattr(cause.response, "status_code", None)
            return (
                f"The hub answered {status or 'an error'} for {repo_id}: try again later; the "
                "files that came down whole are kept."
            )
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return f"The disk of {folder} is full: free some space, then download again."
        if isinstance(cause, PermissionError):
            return f"{folder} cannot be written: choose a folder of yours."
    names = " ".join(type(c).__name__ for c in _chain(error))
    if any(word in names for word in ("Connect", "Timeout", "Network", "gaierror", "Protocol")):
        return (
            "The hub cannot be reached (no network connection?): connect and download again; "
            "the files that came down whole are kept."
        )
    return (
        f"Downloading {repo_id} failed ({type(error).__name__}; the terminal has the details): "
        "check the connection and the folder, then download again."
    )

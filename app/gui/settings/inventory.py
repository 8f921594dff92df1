"""What the Models page lists: every family of :mod:`adapters.registry`, installed or not, where,
its size on disk and what it needs. No Qt; torch-free (the GUI thread builds it).

A family is *installed* when the packages it imports are there and, for a family that loads a
checkpoint, its folder is set (or downloaded into the models folder) and passes the family's
own check. What it needs is the family's :meth:`~adapters.face.Family.footprint`, computed from
its declaration and its files: nothing here restates a family's figures.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from adapters.face import FamilyError, ModelRequest
from adapters.registry import family, family_keys
from app.gui.settings.checkpoints import PUBLIC_CHECKPOINTS, PublicCheckpoint
from app.settings import Settings

__all__ = ["FamilyRow", "disk_bytes", "family_rows"]


@dataclass(frozen=True)
class FamilyRow:
    """One family on the Models page."""

    key: str
    title: str
    installed: bool
    status: str  # "ready", or what is missing and the fix
    where: tuple[Path, ...]
    size_bytes: int
    needs: str
    download: PublicCheckpoint | None  # the public checkpoint it loads, where there is one


def disk_bytes(folders: tuple[Path, ...]) -> int:
    """The bytes of every file under ``folders`` (links not followed)."""
    total = 0
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    return total


def family_rows(settings: Settings, models_dir: Path) -> list[FamilyRow]:
    """Every registered family, in the registry's order (see the module doc)."""
    return [_row(key, settings, models_dir) for key in family_keys()]


def _row(key: str, settings: Settings, models_dir: Path) -> FamilyRow:
    face = family(key)
    download = next((c for c in PUBLIC_CHECKPOINTS if c.family == key), None)
    reads_checkpoint = "checkpoint" in face.reads
    checkpoint = settings.checkpoint if settings.family == key else None
    if checkpoint is None and download is not None:
        fetched = download.checkpoint_in(models_dir / download.folder_name)
        checkpoint = fetched if fetched.is_dir() else None
    request = ModelRequest(
        checkpoint=checkpoint if reads_checkpoint else None,
        model_size="full" if checkpoint is not None else "small",
        arm=settings.arm,
        trust_checkpoint_code=True,  # consent is the session's question, not the inventory's
    )
    footprint = face.footprint(request)
    missing = [m for m in footprint.packages if importlib.util.find_spec(m) is None]
    installed, status = True, "ready"
    if missing:
        installed, status = False, f"needs the Python packages {', '.join(missing)}"
    else:
        try:
            face.check(request)
        except FamilyError as error:
            installed, status = False, str(error)
        else:
            if reads_checkpoint and checkpoint is None and not face.ships_weights:
                installed, status = False, "no checkpoint: seeded random weights (not speech)"
    where = footprint.where
    return FamilyRow(
        key, face.title, installed, status, where, disk_bytes(where), footprint.needs, download
    )

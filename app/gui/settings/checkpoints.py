"""The public checkpoints a user may download from the Models page: each family declares its own
(``Family.downloads``: the hub repository, the files the app needs, the family that loads them).
No Qt; torch-free."""

from __future__ import annotations

from adapters.face import PublicCheckpoint
from adapters.registry import family, family_keys

__all__ = ["PUBLIC_CHECKPOINTS", "PublicCheckpoint"]

PUBLIC_CHECKPOINTS: tuple[PublicCheckpoint, ...] = tuple(
    download for key in family_keys() for download in family(key).downloads
)

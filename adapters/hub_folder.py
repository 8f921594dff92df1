"""A checkpoint folder as the hub keeps it, read before anything loads (torch-free): its
``config.json`` and its safetensors weights (the one file, or the shards its index names),
confined to the folder.

Weights come from the internet: a name that leaves the folder, a FIFO or a link out is refused
(:func:`engine.files_read.confined`); a folder of ``.bin`` files is refused too (they are
pickles, which we never load). Every error is a :class:`~adapters.face.FamilyError` on the
``checkpoint`` setting that names the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.face import FamilyError
from adapters.safetensors_header import Damaged, TensorEntry, read_header
from engine.files_read import FileRefused, confined, read_json

__all__ = ["INDEX", "SINGLE", "config", "header", "inside", "mapping", "shards"]

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def config(path: Path, lacking: str) -> dict[str, Any]:
    """``config.json``'s mapping, or a FamilyError: ``lacking`` is the fix when it is missing."""
    found = mapping(path, "config.json")
    if found is None:
        raise FamilyError(f"checkpoint {path} lacks config.json: {lacking}", "checkpoint")
    return found


def mapping(path: Path, name: str) -> dict[str, Any] | None:
    """The JSON mapping in the folder's file ``name``, None when there is no such file, or a
    FamilyError when it cannot be read or holds something else."""
    file = inside(path, name, name)  # a FIFO is refused, not "lacks"
    if not file.is_file():
        return None
    try:
        found = read_json(file)
    except FileRefused as error:
        raise FamilyError(
            f"checkpoint {path}: {name} cannot be read ({error}): restore the file", "checkpoint"
        ) from None
    if not isinstance(found, dict):
        raise FamilyError(f"checkpoint {path}: {name} is not a mapping", "checkpoint")
    return found


def shards(path: Path) -> tuple[Path, ...]:
    """The safetensors files holding the folder's weights: those :data:`INDEX` names, else
    :data:`SINGLE`; a :class:`FamilyError` when one is missing or there are none."""
    index = path / INDEX
    if index.is_file():
        try:
            weight_map = read_json(inside(path, INDEX, INDEX))["weight_map"]
            names = [str(name) for name in dict.fromkeys(weight_map.values())]
        except (FileRefused, KeyError, TypeError, AttributeError) as error:
            raise FamilyError(
                f"checkpoint {path}: {INDEX} cannot be read ({error}): restore the file",
                "checkpoint",
            ) from None
        found = tuple(inside(path, name, f"{INDEX}'s weight_map") for name in names)
        missing = [shard.name for shard in found if not shard.is_file()]
        if missing:
            raise FamilyError(
                f"checkpoint {path} lacks {len(missing)} weight file(s) its index names "
                f"({missing[0]}, ...): finish the download",
                "checkpoint",
            )
        return found
    if (path / SINGLE).is_file():
        return (path / SINGLE,)
    pickled = sorted(p.name for p in path.glob("*.bin"))
    hint = f" ({pickled[0]} is a pickle, which we do not load)" if pickled else ""
    raise FamilyError(
        f"checkpoint {path} has no safetensors weights{hint}: download the safetensors files",
        "checkpoint",
    )


def inside(folder: Path, name: str, what: str) -> Path:
    """``folder / name`` confined to the folder and regular (or missing), else a FamilyError."""
    try:
        return confined(folder, name, what)
    except FileRefused as error:
        raise FamilyError(f"checkpoint {folder}: {error}: restore the file", "checkpoint") from None


def header(shard: Path) -> dict[str, TensorEntry]:
    """The tensors ``shard``'s header states, or a FamilyError saying why it cannot be read."""
    try:
        return read_header(shard)
    except Damaged as damage:
        raise FamilyError(
            f"weights {shard} are not a readable safetensors file ({damage.what}, "
            f"{damage.detail}): download it again",
            "checkpoint",
        ) from None

"""A safetensors file's header, read torch-free within bounds, or why it cannot be.

A safetensors file is an 8-byte little-endian header length, that many bytes of JSON (each
tensor's ``dtype``, ``shape`` and ``data_offsets`` into the data, plus an optional
``__metadata__``), then the tensors' bytes: the largest ``data_offsets`` end is where the file
must end, so a file cut short (an interrupted download) shows in its size alone.

The file comes from the internet: a header length over :data:`MAX_HEADER` is refused before
anything past the first 8 bytes is read, a length the file cannot hold before it is read, and
JSON too deep for the parser, a wrong type or a missing key is a :class:`Damaged` like any
other, never a traceback.

Why not ``safetensors.safe_open(path, framework="numpy")``, which checks as much: its errors say
neither whether a file is truncated or foreign nor by how many bytes (and their wording changed
between the versions we accept), and it is not a core dependency, while the settings dialog
checks a folder in every install.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

__all__ = ["MAX_HEADER", "Damaged", "TensorEntry", "read_header"]

MAX_HEADER = 100_000_000  # bytes: the safetensors library refuses larger headers too
_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as the header states it (its bytes are not read)."""

    dtype: str  # safetensors' name: "BF16", "F32", "I64", ...
    shape: tuple[int, ...]


class Damaged(Exception):
    """Why a file is no readable safetensors file: ``what`` it is (``empty``, ``truncated``,
    ``not a safetensors file``) and ``detail``, the sizes that show it.

    ``str()`` is the predicate ``is <what> (<detail>)``, for a message that names the file first.
    """

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"is {what} ({detail})")
        self.what = what
        self.detail = detail


def read_header(path: Path) -> dict[str, TensorEntry]:
    """The tensors ``path``'s header states, by name, once the file's size holds them all.

    Raises :class:`Damaged` for an empty file, a header that is cut short, too long or not a
    safetensors header, and a file shorter than the header's offsets say.
    """
    size = path.stat().st_size
    if size == 0:
        raise Damaged("empty", "0 bytes")
    try:
        with path.open("rb") as f:
            (length,) = _LENGTH.unpack(f.read(_LENGTH.size))
            if length > MAX_HEADER:
                raise Damaged("not a safetensors file", f"{size:,} bytes, header length {length:,}")
            if length > size - _LENGTH.size:
                raise Damaged(
                    "truncated", f"{size:,} bytes, its header alone needs {_LENGTH.size + length:,}"
                )
            raw = json.loads(f.read(length))
        tensors, end = _entries(raw)
    except (OSError, struct.error, ValueError, RecursionError):
        raise Damaged(
            "not a safetensors file", f"{size:,} bytes without a readable header"
        ) from None
    expected = _LENGTH.size + length + end
    if size < expected:
        raise Damaged("truncated", f"{size:,} of {expected:,} bytes")
    return tensors


def _entries(raw: object) -> tuple[dict[str, TensorEntry], int]:
    """The header's tensors and where their data ends; ValueError for any other shape."""
    if not isinstance(raw, dict):
        raise ValueError("the header is not a mapping")
    tensors: dict[str, TensorEntry] = {}
    end = 0
    for name, entry in raw.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise ValueError(f"{name}: not a mapping")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or not _naturals(shape) or not _naturals(offsets):
            raise ValueError(f"{name}: no dtype, shape and data_offsets")
        if len(offsets) != 2 or offsets[0] > offsets[1]:
            raise ValueError(f"{name}: data_offsets are not a range")
        tensors[name] = TensorEntry(dtype, tuple(shape))
        end = max(end, offsets[1])
    return tensors, end


def _naturals(value: object) -> TypeGuard[list[int]]:
    """Whether ``value`` is a JSON list of non-negative integers (``true`` is not one)."""
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)

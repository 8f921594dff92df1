"""Hostile safetensors headers: refused as :class:`Damaged` with the sizes that show it, without
reading past the 8-byte length when it is out of bounds, never a traceback."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from adapters.safetensors_header import MAX_HEADER, Damaged, TensorEntry, read_header


def framed(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


def released(path: Path) -> bytes:
    """A file the safetensors library writes: two tensors and metadata."""
    tensors = {"a": torch.zeros(2, 3, dtype=torch.bfloat16), "b": torch.zeros(4, dtype=torch.int64)}
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path.read_bytes()


def test_a_written_file_reads_its_tensors_and_not_its_metadata(tmp_path: Path) -> None:
    released(tmp_path / "w.safetensors")
    assert read_header(tmp_path / "w.safetensors") == {
        "a": TensorEntry("BF16", (2, 3)),
        "b": TensorEntry("I64", (4,)),
    }


ENTRY = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}


@pytest.mark.parametrize(
    ("blob", "damage"),
    [
        (b"", "is empty (0 bytes)"),
        (b"\x01", "is not a safetensors file (1 bytes without a readable header)"),
        (struct.pack("<Q", MAX_HEADER + 1), "header length 100,000,001"),
        (struct.pack("<Q", 1 << 63) + b"{}", "is not a safetensors file (10 bytes, header"),
        (struct.pack("<Q", 50) + b"{}", "is truncated (10 bytes, its header alone needs 58)"),
        (framed(b"[" * 100_000 + b"]" * 100_000), "without a readable header"),
        (framed(b'{"a":' * 100_000 + b"1" + b"}" * 100_000), "without a readable header"),
        (framed(b"[]"), "without a readable header"),
        (framed(b"\xff{}"), "without a readable header"),
        (framed(json.dumps({"a": {**ENTRY, "shape": [True]}}).encode()), "without a readable"),
        (framed(json.dumps({"a": {**ENTRY, "data_offsets": [4, 0]}}).encode()), "without a re"),
        (framed(json.dumps({"a": {"dtype": "F32"}}).encode()), "without a readable header"),
        (framed(json.dumps({"a": ENTRY}).encode(), b"\0" * 3), "is truncated (72 of 73 bytes)"),
    ],
    ids=[
        "empty",
        "one-byte",
        "over-max-header",
        "length-2**63",
        "header-cut",
        "deep-list",
        "deep-object",
        "not-a-mapping",
        "not-utf8",
        "bool-shape",
        "reversed-offsets",
        "missing-keys",
        "data-cut",
    ],
)
def test_a_hostile_or_cut_file_is_damaged_naming_its_sizes(
    tmp_path: Path, blob: bytes, damage: str
) -> None:
    path = tmp_path / "w.safetensors"
    path.write_bytes(blob)
    with pytest.raises(Damaged, match=re.escape(damage)):
        read_header(path)


def test_a_file_cut_anywhere_is_damaged(tmp_path: Path) -> None:
    data = released(tmp_path / "whole.safetensors")
    path = tmp_path / "cut.safetensors"
    for keep in range(len(data)):
        path.write_bytes(data[:keep])
        with pytest.raises(Damaged):
            read_header(path)

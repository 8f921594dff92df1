"""Checkpoint folders read bounded (issue 27): every file a config names stays in the folder and
is a regular file, every JSON/YAML read is bounded before it is read, and every size a config sets
is bounded by the family's declaration before anything is built. All torch-free and quick: the
checks run on the folder's files alone.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.face import FamilyError
from adapters.minicpmo45.folder import check_folder as check_minicpmo45
from adapters.moshi.config import CheckpointError, size_for
from adapters.moshi.config import check_folder as check_moshi
from adapters.token2wav.config import CheckpointError as Token2WavError
from adapters.token2wav.config import check_folder as check_token2wav
from engine.files_read import FileRefused, confined, read_json
from tests.moshi_small import DECLARATION

pytestmark = pytest.mark.timeout(30)  # a FIFO that blocked would hang: fail instead


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _outside(folder: Path) -> Path:
    secret = folder.parent / f"{folder.name}-secret.json"
    secret.write_text('{"model_type": "minicpmo"}')
    return secret


# What a config may name, and the words of its refusal.
HOSTILE_NAMES: dict[str, tuple[Callable[[Path], str], str]] = {
    "/dev/zero": (lambda folder: "/dev/zero", "no absolute path"),
    "/etc/passwd": (lambda folder: "/etc/passwd", "no absolute path"),
    "../": (lambda folder: "../x.safetensors", re.escape("no '..'")),
    "a FIFO": (lambda folder: _fifo(folder / "pipe.json").name, "FIFO"),
    "a symlink to a device": (
        lambda folder: (folder / "zero.json").symlink_to("/dev/zero") or "zero.json",
        "not a regular file",
    ),
    "a symlink to a FIFO": (
        lambda folder: (
            (folder / "pipe.json").symlink_to(_fifo(folder.parent / f"{folder.name}-pipe"))
            or "pipe.json"
        ),
        "FIFO",
    ),
}


@pytest.mark.parametrize("key", ["moshi_name", "mimi_name", "tokenizer_name", "mimi_config_name"])
@pytest.mark.parametrize("case", list(HOSTILE_NAMES))
def test_moshi_config_names_only_files_in_its_folder(tmp_path: Path, key: str, case: str) -> None:
    make, words = HOSTILE_NAMES[case]
    (tmp_path / "config.json").write_text(json.dumps({key: make(tmp_path)}))
    with pytest.raises(CheckpointError, match=words) as error:
        check_moshi(tmp_path)
    assert key in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("case", list(HOSTILE_NAMES))
def test_minicpmo45_config_names_only_files_in_its_folder(tmp_path: Path, case: str) -> None:
    make, words = HOSTILE_NAMES[case]
    (tmp_path / "modeling.py").write_text("")
    config = {"model_type": "minicpmo", "auto_map": {"AutoModel": "modeling.Model"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": make(tmp_path)}}))
    with pytest.raises(FamilyError, match=words):
        check_minicpmo45(tmp_path)
    config["auto_map"] = {"AutoModel": "../modeling.Model"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(FamilyError, match=re.escape("no '..'")):
        check_minicpmo45(tmp_path)
    (tmp_path / "config.json").unlink()
    _fifo(tmp_path / "config.json")
    with pytest.raises(FamilyError, match="FIFO"):
        check_minicpmo45(tmp_path)


@pytest.mark.parametrize("name", ["flow.yaml", "flow.pt", "hift_original.pt"])
def test_token2wav_files_are_regular_files_in_the_folder(tmp_path: Path, name: str) -> None:
    _fifo(tmp_path / name)
    with pytest.raises(Token2WavError, match="FIFO"):
        check_token2wav(tmp_path)
    os.unlink(tmp_path / name)
    (tmp_path / name).symlink_to("/dev/zero")  # a link is followed: to a device, refused
    with pytest.raises(Token2WavError, match="not a regular file"):
        check_token2wav(tmp_path)


def test_a_link_to_a_regular_file_elsewhere_is_followed(tmp_path: Path) -> None:
    """The hub's cache keeps each checkpoint file as a link into its blobs folder: followed."""
    folder = tmp_path / "snapshot"
    folder.mkdir()
    blob = tmp_path / "blobs" / "config"
    blob.parent.mkdir()
    blob.write_text("{}")
    (folder / "config.json").symlink_to(blob)
    assert confined(folder, "config.json", "config") == folder / "config.json"


def test_a_huge_config_is_refused_by_its_size_unread(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    with config.open("wb") as f:
        f.truncate(3 << 30)  # 3 GB, sparse: reading it would take seconds and 6 GB
    with pytest.raises(CheckpointError, match="3,221,225,472 bytes, larger than the bound"):
        check_moshi(tmp_path)
    (tmp_path / "config.json").rename(tmp_path / "big")
    (tmp_path / "config.json").symlink_to(tmp_path / "big")  # inside, still too large
    with pytest.raises(FamilyError, match="larger than the bound"):
        check_minicpmo45(tmp_path)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 100_000 + "]" * 100_000, "nests 100000 deep"),
        ('{"dim": ' + "9" * 5000 + "}", "a number of 5,000 characters"),
        ('{"dim": 1e' + "9" * 40 + "}", "a number of 42 characters"),
        ("\xff\xfe", "not UTF-8"),
        ('{"dim": 1', "not valid JSON"),
    ],
)
def test_json_is_read_within_bounds(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(FileRefused, match=words):
        read_json(path)


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("num_layers", 1_000_000, 32),
        ("dim", 10**12, 4096),
        ("num_heads", 0, 32),
        ("depformer_num_layers", True, 6),
        ("num_layers", "32", 32),
    ],
)
def test_moshi_sizes_are_bounded_by_the_declaration(key: str, value: object, bound: int) -> None:
    full = size_for("full", DECLARATION)
    with pytest.raises(CheckpointError, match=f"{key}={value!r}: expected an integer from 1 to "):
        full.lm_kwargs({}, {key: value})
    assert full.lm_kwargs({}, {key: bound})[key] == bound  # the declared size itself loads


def test_moshi_numbers_the_declaration_leaves_open_are_bounded() -> None:
    full = size_for("full", DECLARATION)
    for key, value in (("hidden_scale", 1e12), ("text_card", 10**9), ("card", float("nan"))):
        with pytest.raises(CheckpointError, match=f"{key}="):
            full.lm_kwargs({}, {key: value})
    base = {"transformer": {"context": 250, "num_layers": 10**6}}
    with pytest.raises(CheckpointError, match="the Mimi config's transformer has num_layers"):
        full.mimi_config({}, base)

"""Hostile checkpoints: a corrupt or unsafe file is named in one line that never repeats torch's
advice to load unsafely; non-string keys and NaN weights are refused; the synth command says so
without a traceback (issue 12, "One line, never a traceback")."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from adapters.token2wav.config import CheckpointError
from adapters.token2wav.hift import load_hift
from adapters.weights import load_state
from tests.hostile.child import cli, one_line_error
from tests.test_token2wav_checkpoint import SMALL_YAML


class Payload:
    """What an attacker pickles: a class whose unpickling would run code."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("pwned",))


def corrupt_files(folder: Path) -> dict[str, Path]:
    folder.mkdir(exist_ok=True)
    files = {name: folder / f"{name}.pt" for name in ("noise", "truncated", "payload", "empty")}
    files["noise"].write_bytes(bytes(range(256)) * 8)
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(1000)}, buffer)
    files["truncated"].write_bytes(buffer.getvalue()[:700])
    torch.save({"w": Payload()}, files["payload"], pickle_protocol=pickle.HIGHEST_PROTOCOL)
    files["empty"].write_bytes(b"")
    return files


def test_corrupt_or_unsafe_files_are_named_never_loaded_unsafely(tmp_path: Path) -> None:
    for name, path in corrupt_files(tmp_path).items():
        with pytest.raises(CheckpointError) as info:
            load_state(path, CheckpointError)
        message = str(info.value)
        assert str(path) in message and "not a valid PyTorch checkpoint" in message, name
        assert "weights_only=False" not in message and "\n" not in message, name
    assert zipfile.is_zipfile(tmp_path / "payload.pt")  # a real checkpoint, refused unread


@pytest.mark.parametrize(
    ("state", "needle"),
    [
        ({1: torch.zeros(1)}, "a key 1 that is not a string"),
        ({"w": [1, 2]}, "`w` is a list, not a tensor"),
        ({"w": torch.full((4,), float("nan"))}, "`w` holds 4 NaN or infinite values of 4"),
        (torch.zeros(3), "holds a Tensor; expected a state_dict"),
    ],
)
def test_odd_contents_are_refused(tmp_path: Path, state: object, needle: str) -> None:
    path = tmp_path / "hift_original.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=needle):
        load_hift(path)


def test_synth_on_a_corrupt_checkpoint_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "t2w"
    folder.mkdir()
    (folder / "flow.yaml").write_text(SMALL_YAML)
    (folder / "flow.pt").write_bytes(b"PK\x03\x04 not really a zip")
    (folder / "hift_original.pt").write_bytes(b"")
    result = cli(
        "synth", "--voice-frames", "40", "--seconds", "1", "--checkpoint", str(folder),
        "--wav", str(tmp_path / "out.wav"), "--device", "cpu", "--arm", "eager",
        timeout=120,
    )  # fmt: skip
    line = one_line_error(result, "bad checkpoint", str(folder / "flow.pt"))
    assert "weights_only" not in result.stderr, line
    assert not (tmp_path / "out.wav").exists()

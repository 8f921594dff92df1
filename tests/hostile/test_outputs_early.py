"""Every output checked before the models load, the same way in every command: the input is
never overwritten, existing files need --force, derived files do not replace unrelated ones,
a NaN input is named (issue 12, "Check paths early" and "Never clobber")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import soundfile

from app.converse import ConverseError, ConverseRequest, check_request
from app.demo import write_talk
from app.settings import Settings, load_settings, save_settings
from tests.hostile.child import cli, one_line_error, snapshot


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_talk(tmp_path / "talk.wav", 3)
    (tmp_path / "mydata.csv").write_text("the user's own table")
    soundfile.write(tmp_path / "keep.wav", np.full(100, 0.5, np.float32), 24_000)
    (tmp_path / "sub").mkdir()
    return tmp_path


def converse(folder: Path, *argv: str) -> list[str]:
    return ["converse", "--headless", "--family", "synthetic", "--device", "cpu", "--input",
            str(folder / "talk.wav"),
            "--model-size", "small", "--quiet", *argv]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "needles"),
    [
        ({"output": "talk.wav"}, ["--output", "is the --input file"]),
        ({"output": "keep.wav"}, ["keep.wav already exists", "--force"]),
        ({"output": "sub"}, ["must end in .wav"]),
        ({"trace": "mydata.json"}, ["mydata.csv already exists", "--force"]),
        ({"record_audio": "keep.wav"}, ["is a file"]),
    ],
    ids=["output-is-input", "existing-output", "folder-output", "derived-csv", "record-file"],
)
def test_converse_refuses_before_loading(
    folder: Path, changes: dict[str, str], needles: list[str]
) -> None:
    before = snapshot(folder)
    paths = {"output": folder / "o.wav", **{k: folder / v for k, v in changes.items()}}
    request = ConverseRequest(
        settings=Settings(family="synthetic"), input=folder / "talk.wav", **paths
    )
    with pytest.raises(ConverseError) as info:
        check_request(request)
    assert all(needle in str(info.value) for needle in needles), info.value
    assert snapshot(folder) == before
    if "--force" in needles:  # what --force allows, it allows before loading too
        check_request(dataclasses.replace(request, force=True))


def test_the_command_says_it_in_one_line(folder: Path) -> None:
    argv = converse(folder, "--output", str(folder / "talk.wav"))
    one_line_error(cli(*argv, cwd=folder), "--output", "is the --input file")


def test_a_nan_input_is_named_before_loading(folder: Path) -> None:
    audio = np.zeros(16_000, np.float32)
    audio[100] = np.nan
    soundfile.write(folder / "nan.wav", audio, 16_000, subtype="FLOAT")
    argv = converse(folder, "--output", str(folder / "o.wav"))
    argv[argv.index("--input") + 1] = str(folder / "nan.wav")
    one_line_error(cli(*argv, cwd=folder), "nan.wav", "holds NaN or infinite samples")
    assert not (folder / "o.wav").exists()


def test_synth_refuses_an_existing_wav_without_force(folder: Path) -> None:
    before = snapshot(folder)
    result = cli(
        "synth", "--voice-frames", "40", "--seconds", "1", "--wav", str(folder / "keep.wav"),
        "--device", "cpu", cwd=folder,
    )  # fmt: skip
    one_line_error(result, "keep.wav already exists", "--force")
    assert snapshot(folder) == before


def test_a_broken_settings_file_is_backed_up_before_it_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("arm: [unclosed\n")
    save_settings(Settings(family="synthetic", seed=3), path)
    assert (tmp_path / "settings.yaml.bak").read_text() == "arm: [unclosed\n"
    assert load_settings(path).seed == 3


def _header_rate(source: Path, target: Path, rate: int) -> Path:
    """``source`` (a 16-bit mono WAV) with another rate in its header."""
    data = bytearray(source.read_bytes())
    data[24:28] = rate.to_bytes(4, "little")
    data[28:32] = (rate * 2 % 2**32).to_bytes(4, "little")  # bytes per second
    target.write_bytes(bytes(data))
    return target


@pytest.mark.parametrize("case", ["empty", "rate 2^31-1", "rate 1 Hz"])
def test_audio_no_run_can_use_is_refused_before_loading(folder: Path, case: str) -> None:
    bad = folder / "bad.wav"
    if case == "empty":
        soundfile.write(bad, np.zeros(0, np.float32), 16_000, subtype="PCM_16")
    else:
        _header_rate(folder / "talk.wav", bad, 2**31 - 1 if "2^31" in case else 1)
    request = ConverseRequest(
        settings=Settings(family="synthetic"), input=bad, output=folder / "o.wav"
    )
    with pytest.raises(ConverseError, match=r"bad\.wav (holds no audio|says its rate is)"):
        check_request(request)
    assert not (folder / "o.wav").exists()

"""Refused early, in plain words (issue 27): an output name no run could finish writing (too long
for the folder once the temporary name is added, control characters) is refused before any
work; ``demo`` checks the disk for all it will write before writing anything; an error the
operating system raised is its own words (exit 74), not "bad request" or "internal error";
SIGTERM while ``demo`` writes its talk is exit 143, with no cffi traceback and no file left."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from app import cli
from app.outputs import OutputsError, check_outputs
from tests.hostile.child import assert_clean, run


def test_names_that_could_not_be_finished_are_refused_first(tmp_path: Path) -> None:
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    fits = "a" * (name_max - 14 - 4) + ".wav"
    check_outputs([("--output", tmp_path / fits)])
    for name, words in (
        ("a" * (name_max - 13 - 4) + ".wav", f"names in {tmp_path} may have {name_max - 14}"),
        ("a" * 240 + ".json", "choose a shorter name"),
        ("line\nbreak.wav", "control character"),
        ("bell\a.wav", "control character"),
        (os.fsdecode(b"\xff\xfe.wav"), "not UTF-8"),
    ):
        with pytest.raises(OutputsError, match=words) as error:
            check_outputs([("--trace", tmp_path / name)])
        assert str(error.value).startswith("--trace ") and "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_demo_checks_the_disk_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["demo", "--seconds", "100000000", "--out", str(tmp_path), "--family", "synthetic"]
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "MiB free; this run may write up to" in err and "free some space" in err, err
    assert list(tmp_path.iterdir()) == []


def test_os_errors_are_the_systems_words(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def full(args: object) -> int:
        raise OSError(28, "No space left on device", "out/t.csv")

    monkeypatch.setattr(cli, "_run_export", full)
    assert cli.main(["export", "t.jsonl"]) == cli.EXIT_OS
    err = capsys.readouterr().err.strip()
    assert err == (
        "duplexcadence export: the operating system refused (out/t.csv): No space left on device"
    )


SIGTERM_IN_TALK = """
import os, signal, wave
from app.cli import main

original, calls = wave.Wave_write.writeframes, [0]

def writeframes(self, data):
    calls[0] += 1
    if calls[0] == 3:
        os.kill(os.getpid(), signal.SIGTERM)  # lands inside the talk's WAV write
    return original(self, data)

wave.Wave_write.writeframes = writeframes
sys.exit(main(["demo", "--seconds", "600", "--out", "out", "--family", "synthetic"]))
"""


def test_sigterm_while_demo_writes_its_talk(tmp_path: Path) -> None:
    done = run(SIGTERM_IN_TALK, cwd=tmp_path, timeout=120)
    assert_clean(done)
    assert done.returncode == cli.EXIT_TERMINATED, done.stderr[-2000:]
    assert "cffi" not in done.stderr and "Ctrl-C" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "duplexcadence: terminated (SIGTERM)"
    assert list((tmp_path / "out").iterdir()) == []  # the talk's temporary file is gone


@pytest.mark.parametrize("command", ["synth", "converse"])
@pytest.mark.parametrize("seed", [str(2**70), "9" * 5000, "-1"])
def test_a_huge_seed_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: str, seed: str
) -> None:
    extra = ["--voice-frames", "10", "--wav", "x.wav"] if command == "synth" else ["--headless"]
    with pytest.raises(SystemExit) as done:
        cli.main([command, *extra, "--seed", seed])
    assert done.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --seed" in err and "give a non-negative integer up to 2^62" in err, err


def test_a_huge_seed_in_settings_names_the_key() -> None:
    from app.settings import Settings, SettingsError, check_settings

    with pytest.raises(
        SettingsError, match=re.escape("seed = 1.18e+21: give a non-negative integer up to 2^62")
    ):
        check_settings(Settings(family="synthetic", seed=2**70))

"""The basic voice is the user's default (issue 15); ``synthetic`` stays what tests and
benchmarks name. Without the basic voice's packages the default falls back in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from app.periods import write_wav
from app.settings import Settings, fall_back
from tests.default_family import basic_missing, basic_present


def test_the_default_is_the_basic_voice(monkeypatch: pytest.MonkeyPatch) -> None:
    basic_present(monkeypatch)
    assert Settings().family == "basic"
    assert fall_back(Settings()) == (Settings(), None)


def test_a_missing_package_falls_back_to_random_weights_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    basic_missing(monkeypatch)
    settings, line = fall_back(Settings(seed=4))
    assert settings == Settings(family="synthetic", seed=4)
    assert line is not None and "\n" not in line
    assert "no-such-package" in line and "scripts/setup.sh" in line and "random weights" in line
    chosen = Settings(family="moshi")  # a family the user chose never changes
    assert fall_back(chosen) == (chosen, None)


def test_converse_without_a_family_falls_back_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    basic_missing(monkeypatch)
    talk = write_wav(tmp_path / "talk.wav", np.zeros(16_000, np.float32), 16_000)
    argv = ["converse", "--headless", "--input", str(talk), "--output", str(tmp_path / "o.wav")]
    argv += ["--device", "cpu", "--model-size", "small", "--seconds", "1", "--quiet"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "Token2Wav" in json.loads(out)["model"] or "synthetic" in json.loads(out)["model"]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "no-such-package" in lines[0] and "Traceback" not in err


def test_naming_the_basic_voice_without_its_packages_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    basic_missing(monkeypatch)
    talk = write_wav(tmp_path / "talk.wav", np.zeros(16_000, np.float32), 16_000)
    argv = ["converse", "--headless", "--family", "basic", "--input", str(talk)]
    assert main([*argv, "--output", str(tmp_path / "o.wav"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-package" in err and "Traceback" not in err

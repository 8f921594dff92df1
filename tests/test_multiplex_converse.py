"""``duplexcadence converse --headless --sessions N``: N conversations on one set of weights in
one process, each with its own output, trace and summary; bad combinations refused in one
line. CPU, the small Token2Wav family (the engine's exactness per session is
tests/test_multiplex.py's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile

from app.cli import main
from tests.speech import conversation


@pytest.fixture(scope="module")
def talk_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    talk = conversation([0.3, "hello there", 0.5])
    return talk.write(tmp_path_factory.mktemp("talk") / "talk.wav")


def test_two_sessions_write_their_own_files(
    tmp_path: Path, talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["converse", "--headless", "--family", "synthetic", "--device", "cpu", "--quiet"]
    argv += ["--input", str(talk_wav), "--output", str(tmp_path / "out{i}.wav")]
    argv += ["--trace", str(tmp_path / "trace.json"), "--sessions", "2", "--seconds", "4"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert len(summary["sessions"]) == 2
    for i, session in enumerate(summary["sessions"]):
        assert session["periods"] == 4
        assert session["output"] == str(tmp_path / f"out{i}.wav")
        assert (tmp_path / f"trace.{i}.jsonl").is_file()
        assert soundfile.info(tmp_path / f"out{i}.wav").frames == 4 * 24_000


def test_sessions_on_a_device_is_one_line(
    talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["converse", "--headless", "--family", "synthetic", "--sessions", "2"]
    argv += ["--input", str(talk_wav), "--output-device", "default"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--sessions 2 runs on files" in err

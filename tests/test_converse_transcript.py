"""``converse --headless`` writes the transcript beside its trace as the desktop app does
(``app.transcript.write_beside``), never over an earlier file without ``--force``, and
``duplexcadence export`` rebuilds it from the JSONL.

The small synthetic model says no text, so its periods are given words the way a family with a
recognizer and a text stream gives them (the period outcome's ``heard`` and ``text``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from app.transcript import transcript_path
from tests.speech import conversation

pytestmark = pytest.mark.usefixtures("one_thread")

PERIODS = 4


class _Talking:
    """The session's period model, its steps given words: period 1 hears the user ask "how
    are you"; even periods say `` w<index>`` (the loop writes them into the trace)."""

    def __init__(self, model: Any) -> None:
        self._model, self._index = model, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def step(self, mic: Any) -> Any:
        index, self._index = self._index, self._index + 1
        return dataclasses.replace(
            self._model.step(mic),
            heard="how are you" if index == 1 else "",
            text=f" w{index}" if index % 2 == 0 else "",
        )


@pytest.fixture
def talking(monkeypatch: pytest.MonkeyPatch) -> None:
    import app.session

    build = app.session.build_session

    def build_talking(*args: Any, **kwargs: Any) -> Any:
        session = build(*args, **kwargs)
        session.loop.model = _Talking(session.loop.model)
        return session

    monkeypatch.setattr(app.session, "build_session", build_talking)


@pytest.fixture(scope="module")
def talk_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    talk = conversation([0.3, "hello there", 0.5])
    return talk.write(tmp_path_factory.mktemp("talk") / "talk.wav")


def _converse(talk_wav: Path, folder: Path, *extra: str) -> list[str]:
    argv = ["converse", "--headless", "--family", "synthetic", "--device", "cpu", "--quiet"]
    argv += ["--input", str(talk_wav), "--output", str(folder / "out.wav")]
    return [*argv, "--trace", str(folder / "trace.json"), "--seconds", str(PERIODS), *extra]


def test_converse_writes_both_sides_beside_the_trace_and_export_rebuilds_them(
    tmp_path: Path, talk_wav: Path, talking: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_converse(talk_wav, tmp_path)) == 0
    summary = json.loads(capsys.readouterr().out)
    beside = tmp_path / "trace.transcript.txt"
    assert summary["transcript"] == str(beside) == str(transcript_path(tmp_path / "trace.json"))
    text = beside.read_text()
    speakers = [line.split("] ", 1)[1] for line in text.splitlines()]
    assert speakers == ["Assistant: w0", "You: how are you", "Assistant: w2"]
    assert text.startswith("[00:00.0] Assistant: w0\n[00:01.0] You: how are you\n")

    # The export rebuilds it from the JSONL, word for word; an existing one needs --force.
    jsonl = tmp_path / "trace.jsonl"
    assert main(["export", str(jsonl)]) == 2
    assert "trace.transcript.txt already exists" in capsys.readouterr().err
    for name in ("trace.json", "trace.csv", "trace.transcript.txt"):
        (tmp_path / name).unlink()
    assert main(["export", str(jsonl)]) == 0
    assert json.loads(capsys.readouterr().out)["transcript"] == str(beside)
    assert beside.read_text() == text


def test_an_earlier_transcript_is_kept_unless_force(
    tmp_path: Path, talk_wav: Path, talking: None, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = tmp_path / "trace.transcript.txt"
    earlier.write_text("an earlier run's words\n")
    assert main(_converse(talk_wav, tmp_path)) == 2  # refused before the model loads
    err = capsys.readouterr().err
    assert f"{earlier} already exists" in err and "--force" in err
    assert earlier.read_text() == "an earlier run's words\n"
    assert not (tmp_path / "out.wav").exists()
    assert main(_converse(talk_wav, tmp_path, "--force")) == 0
    assert "Assistant: w0" in earlier.read_text()


def test_a_model_without_text_writes_no_transcript(
    tmp_path: Path, talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_converse(talk_wav, tmp_path)) == 0
    assert "transcript" not in json.loads(capsys.readouterr().out)
    assert not (tmp_path / "trace.transcript.txt").exists()

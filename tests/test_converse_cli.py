"""``duplexcadence converse --headless`` on files: the app's loop end to end, and early errors.

The input is espeak-ng speech written as a 22.05 kHz WAV (the command resamples it to 16 kHz);
the small model runs on the CPU. The command writes the assistant's WAV (period-aligned with the
input), the JSONL trace, its Perfetto and CSV exports, and the two channels on request.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr

from app.cli import main
from engine.trace import read_trace
from engine.trace_export import validate_chrome_trace
from tests.speech import conversation

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def talk_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    talk = conversation([0.3, "hello there, how are you doing today", 1.0])
    path = tmp_path_factory.mktemp("talk") / "talk.wav"
    soundfile.write(path, soxr.resample(talk.audio, 16_000, 22_050), 22_050, subtype="PCM_16")
    return path


def test_converse_on_files_writes_audio_trace_and_channels(
    tmp_path: Path, talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, trace, channels = tmp_path / "out.wav", tmp_path / "trace.json", tmp_path / "channels"
    argv = ["converse", "--headless", "--family", "synthetic", "--input", str(talk_wav)]
    argv += ["--output", str(out)]
    argv += ["--trace", str(trace), "--arm", "SR", "--device", "cpu", "--quiet"]
    assert main([*argv, "--record-audio", str(channels)]) == 0
    summary = json.loads(capsys.readouterr().out)
    periods = summary["periods"]
    # The file's periods, then silence until the answer is over (not cut mid-turn).
    assert periods > 4 and summary["turns"] == 1 and summary["arms"] == ["SR"]
    audio, rate = soundfile.read(out, dtype="float32")
    assert rate == 24_000 and audio.size == periods * 24_000 and np.abs(audio).max() > 0.05
    mic, mic_rate = soundfile.read(channels / "mic.wav", dtype="float32")
    assert mic_rate == 16_000 and mic.size == periods * 16_000
    assistant, _ = soundfile.read(channels / "assistant.wav", dtype="float32")
    assert np.array_equal(assistant, audio)

    header, records = read_trace(trace.with_suffix(".jsonl"))
    assert len(records) == periods and header["arm"] == "SR"
    assert records[-1]["loop"]["phase"] == "listen"
    validate_chrome_trace(json.loads(trace.read_text()))
    assert len(trace.with_suffix(".csv").read_text().splitlines()) == periods + 1


def test_seconds_runs_exactly_that_many_periods(
    tmp_path: Path, talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.wav"
    argv = ["converse", "--headless", "--family", "synthetic", "--input", str(talk_wav)]
    argv += ["--output", str(out)]
    assert main([*argv, "--seconds", "2", "--device", "cpu", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["periods"] == 2
    assert soundfile.info(out).frames == 2 * 24_000


def test_realtime_paces_the_input_to_the_clock(
    tmp_path: Path, talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    argv = ["converse", "--headless", "--family", "synthetic", "--input", str(talk_wav)]
    argv += ["--output", str(tmp_path / "o.wav")]
    start = time.monotonic()
    assert main([*argv, "--seconds", "2", "--realtime", "--device", "cpu", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["periods"] == 2
    assert time.monotonic() - start >= 2.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "/nonexistent.wav", "--output", "{tmp}/o.wav"], "does not exist"),
        (["--input", "{talk}", "--output", "{tmp}/missing/o.wav"], "mkdir -p"),
        (["--input", "{talk}", "--output", "{tmp}/o.mp3"], "must end in .wav"),
        (["--input", "{talk}", "--output", "{tmp}/o.wav", "--trace", "{tmp}/t.txt"], ".json"),
        (["--input", "{talk}", "--output", "{tmp}/o.wav", "--arm", "XR"], "unknown arm"),
        (["--output", "{tmp}/o.wav"], "--input FILE.wav"),
        (["--input", "{talk}", "--output", "{tmp}/o.wav", "--checkpoint", "{tmp}"], "lacks"),
    ],
)
def test_bad_requests_fail_early_with_the_fix(
    tmp_path: Path,
    talk_wav: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    argv = [a.format(tmp=tmp_path, talk=talk_wav) for a in args]
    extra = ["--model-size", "full"] if "--checkpoint" in args else []
    argv = ["converse", "--headless", "--family", "synthetic", "--device", "cpu", *extra, *argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_without_headless_the_command_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["converse", "--input", "x.wav", "--output", "y.wav"]) == 2
    assert "--headless" in capsys.readouterr().err


def test_gui_subcommand_hands_its_arguments_to_the_app(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["gui", "--help"])
    assert exit_info.value.code == 0
    assert "--input-wav" in capsys.readouterr().out

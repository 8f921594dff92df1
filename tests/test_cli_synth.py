"""``duplexcadence synth``: headless Token2Wav writes a WAV and a Perfetto trace; bad input fails
early with the fix in the message. Full-size seeded random weights on the CPU, one second."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile

from app.cli import main
from engine.trace_export import validate_chrome_trace


def test_synth_writes_audio_and_a_valid_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav, trace = tmp_path / "out.wav", tmp_path / "out.json"
    argv = ["synth", "--voice-frames", "20", "--seconds", "1", "--arm", "SRc", "--device", "cpu"]
    assert main([*argv, "--wav", str(wav), "--trace", str(trace)]) == 0
    audio, rate = soundfile.read(wav)
    assert rate == 24_000 and len(audio) > 24_000 and abs(audio).max() > 0
    events = json.loads(trace.read_text())
    validate_chrome_trace(events)
    assert events["metadata"]["arm"] == "SRc"
    summary = json.loads(capsys.readouterr().out)
    assert summary["audio_s"] > 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--voice-frames", "21"], "even number"),
        (["--voice-frames", "20", "--arm", "XR"], "unknown arm"),
        (["--voice-frames", "20", "--checkpoint", "/nonexistent"], "does not exist"),
        (["--prompt-wav", "voice.wav"], "--prompt-wav needs --checkpoint"),
    ],
)
def test_bad_requests_fail_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status = main(["synth", *args, "--device", "cpu", "--wav", str(tmp_path / "x.wav")])
    assert status == 2
    assert message in capsys.readouterr().err


def test_malformed_trace_path_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "missing" / "t.json"
    argv = ["synth", "--voice-frames", "20", "--device", "cpu", "--wav", str(tmp_path / "x.wav")]
    assert main([*argv, "--trace", str(trace)]) == 2
    assert "missing" in capsys.readouterr().err


def test_the_help_quotes_the_declared_voice_limits_without_torch() -> None:
    """``synth --help`` reads the voice prompt's limits from the declarations (as the prompt's
    check does), and building the command line imports no torch."""
    import os
    import subprocess
    import sys

    from adapters.token2wav.voice_limits import max_prompt_seconds

    code = (
        "import contextlib, io, sys\n"
        "from app.cli import build_parser\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    build_parser().parse_args(['synth', '--help'])\n"
        "assert 'torch' not in sys.modules, 'the command line imported torch'\n"
        "print(out.getvalue())\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    words = " ".join(done.stdout.split())
    minicpmo, lychee = max_prompt_seconds("minicpmo45"), max_prompt_seconds("lycheefd")
    assert f"(1 to {minicpmo:.2f} s, Lychee-FD's to {lychee:.2f} s;" in words

"""The demo: the talk it ships, ``duplexcadence demo``, and ``scripts/run.sh`` without a display."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from app.cli import main
from app.demo import RATE, talk, talk_periods
from engine.trace_export import validate_chrome_trace

ROOT = Path(__file__).resolve().parents[1]


def test_talk_is_seeded_speech_and_silence() -> None:
    audio = talk(20, seed=0)
    assert audio.shape == (20 * RATE,) and audio.dtype == np.float32
    assert np.array_equal(audio, talk(20, seed=0))
    assert not np.array_equal(audio, talk(20, seed=1))
    voiced = np.abs(audio) > 1e-3
    assert 0.1 < voiced.mean() < 0.9, "the talk is neither silent nor wall-to-wall speech"
    periods = talk_periods(20, seed=0)
    assert len(periods) == 20 and np.array_equal(np.concatenate(periods), audio)


def test_demo_writes_audio_and_traces(tmp_path: Path, capsys: object) -> None:
    argv = ["demo", "--family", "synthetic", "--seconds", "3", "--device", "cpu"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    for name in ("talk.wav", "assistant.wav", "trace.jsonl", "trace.csv", "trace.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    validate_chrome_trace(json.loads((tmp_path / "trace.json").read_text()))


def test_run_without_display_runs_the_demo(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["XDG_DATA_HOME"] = str(tmp_path)  # platformdirs puts the demo's files here
    env["DUPLEXCADENCE_VENV"] = str(Path(sys.executable).parents[1])
    done = subprocess.run(
        [str(ROOT / "scripts" / "run.sh")],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no display" in done.stderr
    assert (tmp_path / "duplexcadence" / "demo" / "assistant.wav").is_file()

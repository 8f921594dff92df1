"""Nothing lost on interrupt: SIGKILL leaves a playable WAV and a readable JSONL (from which
``duplexcadence export`` rebuilds the rest), SIGTERM ends a run like Ctrl-C, Ctrl-C while
loading is one line (issue 12, "Nothing lost on interrupt")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile

from app.demo import write_talk
from engine.trace import read_trace
from tests.hostile.child import ROOT, assert_clean, cli, run

RATE_OUT = 24_000  # the assistant's rate (Token2Wav)


def start_converse(folder: Path, *extra: str) -> subprocess.Popen[str]:
    talk = write_talk(folder / "talk.wav", 20)
    argv = [
        "converse", "--headless", "--family", "synthetic", "--input", str(talk),
        "--output", str(folder / "o.wav"),
        "--trace", str(folder / "t.json"), "--device", "cpu", "--model-size", "small",
        "--realtime", "--quiet", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=folder,
    )


def wait_for_periods(jsonl: Path, periods: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        if jsonl.exists() and jsonl.read_text().count('"type":"period"') >= periods:
            return
        time.sleep(0.1)
    process.kill()
    pytest.fail(f"no {periods} periods in {jsonl} within 90 s")


def test_sigkill_leaves_a_playable_wav_and_a_trace_to_export(tmp_path: Path) -> None:
    process = start_converse(tmp_path)
    wait_for_periods(tmp_path / "t.jsonl", 3, process)
    process.kill()
    process.communicate(timeout=30)
    _, records = read_trace(tmp_path / "t.jsonl")
    audio, rate = soundfile.read(tmp_path / "o.wav", dtype="float32")
    assert rate == RATE_OUT and len(records) >= 3
    assert len(audio) >= (len(records) - 1) * RATE_OUT  # every period written but the one in flight
    rebuilt = cli("export", str(tmp_path / "t.jsonl"), memory=1 << 30)
    assert_clean(rebuilt)
    assert rebuilt.returncode == 0 and (tmp_path / "t.json").is_file()
    assert (tmp_path / "t.csv").read_text().count("\n") == len(records) + 1


def test_sigterm_ends_a_run_like_ctrl_c(tmp_path: Path) -> None:
    process = start_converse(tmp_path)
    wait_for_periods(tmp_path / "t.jsonl", 3, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert process.returncode == 0, stderr[-3000:]
    _, records = read_trace(tmp_path / "t.jsonl")
    assert soundfile.info(tmp_path / "o.wav").frames == len(records) * RATE_OUT
    assert (tmp_path / "t.csv").read_text().count("\n") == len(records) + 1
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["o.wav", "t.csv", "t.json", "t.jsonl", "talk.wav"]  # no stray temp files


def test_ctrl_c_while_loading_is_one_line(tmp_path: Path) -> None:
    process = start_converse(tmp_path)
    time.sleep(1.5)  # importing torch and building the models take longer than this
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert process.returncode in (0, 130), stderr[-3000:]  # 0: it had finished loading
    if process.returncode == 130:
        assert stderr.strip().splitlines()[-1] == "duplexcadence: interrupted"


def test_a_long_input_is_streamed_in_flat_memory(tmp_path: Path) -> None:
    """An hour at 8 kHz: decoded whole and resampled it would peak past 350 MB; streamed, the
    child's peak stays near its imports."""
    import numpy as np

    long = tmp_path / "hour.wav"
    block = (0.1 * np.sin(np.arange(8_000 * 60) / 8_000 * 2 * np.pi * 220)).astype(np.float32)
    with soundfile.SoundFile(long, "w", 8_000, 1, subtype="PCM_16") as f:
        for _ in range(60):
            f.write(block)
    code = f"""
        from app.periods import WavSource
        source = WavSource({str(long)!r}, 16_000)
        periods = 0
        while source.read_period(16_000) is not None:
            periods += 1
        with open("/proc/self/status") as status:  # VmHWM: this image's peak (ru_maxrss
            hwm = next(line for line in status if line.startswith("VmHWM"))  # counts the parent)
        print(periods, int(hwm.split()[1]) // 1024)
    """
    result = run(code, timeout=120, memory=1 << 30)
    assert_clean(result)
    periods, peak_mib = map(int, result.stdout.split())
    assert periods == 3_600 and peak_mib < 150, result.stdout

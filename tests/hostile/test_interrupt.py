"""Nothing lost on interrupt: SIGKILL leaves a playable WAV and a readable JSONL (from which
``duplexcadence export`` rebuilds the rest), SIGTERM from another process ends a run like
Ctrl-C, Ctrl-C while loading is one line (issue 12, "Nothing lost on interrupt"). The signals
are sent once the run shows the progress asked for (periods in its JSONL, a line on its stderr),
polled: never after a fixed sleep. ``test_interrupt_moments`` stops runs at exact moments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import soundfile

from app.demo import write_talk
from engine.trace import read_trace
from tests.hostile.child import ROOT, Forked, assert_clean, cli, run, start
from tests.hostile.whole import assert_whole, converse_argv

RATE_OUT = 24_000  # the assistant's rate (Token2Wav)


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten minutes: on the simulated clock a run lasts far longer than it takes to stop it."""
    return write_talk(tmp_path_factory.mktemp("talk") / "talk.wav", 600)


def start_converse(folder: Path, talk: Path, *extra: str, loaded: bool = True) -> Forked:
    """The command on ``talk`` in a child, outputs in ``folder/run`` (``loaded``: the model
    handed over as loaded, :func:`tests.hostile.child.run`)."""
    (folder / "run").mkdir()
    argv = converse_argv(folder / "run", talk, *extra)
    code = f"from app.cli import main\nsys.exit(main({argv!r}))"
    return start(code, cwd=folder, shared=argv if loaded else None)


def wait_until(
    done: Callable[[], bool], process: Forked | subprocess.Popen[str], what: str
) -> None:
    """Poll ``done`` until it holds; fail if the run ends first or within 120 s it does not."""
    deadline = time.monotonic() + 120
    while not done():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.communicate()
            pytest.fail(f"the run ended or stalled before {what}")
        time.sleep(0.02)


def periods_in(jsonl: Path, periods: int) -> Callable[[], bool]:
    return lambda: jsonl.exists() and jsonl.read_text().count('"type":"period"') >= periods


def test_sigkill_leaves_a_playable_wav_and_a_trace_to_export(tmp_path: Path, talk: Path) -> None:
    process = start_converse(tmp_path, talk, "--quiet")
    run_dir = tmp_path / "run"
    wait_until(periods_in(run_dir / "t.jsonl", 3), process, "3 periods")
    process.kill()
    process.communicate(timeout=30)
    _, records = read_trace(run_dir / "t.jsonl")  # a SIGKILL may cut the line in flight
    audio, rate = soundfile.read(run_dir / "o.wav", dtype="float32")
    assert rate == RATE_OUT and len(records) >= 3
    assert len(audio) >= (len(records) - 1) * RATE_OUT  # every period written but the one in flight
    rebuilt = cli("export", str(run_dir / "t.jsonl"), memory=1 << 30)
    assert_clean(rebuilt)
    assert rebuilt.returncode == 0 and (run_dir / "t.json").is_file()
    assert (run_dir / "t.csv").read_text().count("\n") == len(records) + 1


def test_sigterm_from_another_process_ends_a_run_like_ctrl_c(tmp_path: Path, talk: Path) -> None:
    """Its files are whole as after Ctrl-C; it exits 143 and says SIGTERM (issue 27)."""
    process = start_converse(tmp_path, talk, "--quiet", "--record-audio", "rec")  # in the cwd
    run_dir = tmp_path / "run"
    wait_until(periods_in(run_dir / "t.jsonl", 3), process, "3 periods")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert process.returncode == 143, stderr[-3000:]
    assert "terminated (SIGTERM)" in stderr and "Ctrl-C" not in stderr, stderr[-3000:]
    periods = json.loads(stdout)["periods"]
    assert periods >= 3 and assert_whole(run_dir) == periods
    recorded = {"mic.wav": 16_000, "assistant.wav": RATE_OUT}
    for name, rate in recorded.items():
        assert soundfile.info(tmp_path / "rec" / name).frames == periods * rate, name
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == ["o.wav", "t.csv", "t.json", "t.jsonl"]  # no stray temp files


def test_ctrl_c_while_loading_is_one_line(tmp_path: Path, talk: Path) -> None:
    process = start_converse(tmp_path, talk, loaded=False)  # progress on: "loading" shows
    wait_until(lambda: "loading" in process.output()[1], process, "loading began")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert process.returncode in (0, 130), stderr[-3000:]  # 0: it had finished loading
    if process.returncode == 130:
        assert stderr.strip().splitlines()[-1] == "duplexcadence: interrupted"


DRIVER = """
import sys
from app import cli

def interrupted(args):  # Ctrl-C lands while a dataclass defines its methods (exec of a string)
    exec("raise KeyboardInterrupt")

cli._run_export = interrupted
sys.exit(cli.main(["export", "t.jsonl"]))
"""


def test_an_interrupt_caught_after_it_left_an_exec_still_exits_130(tmp_path: Path) -> None:
    """``python -m``, as the tests run the command: CPython would end it by SIGINT (-2) after a
    KeyboardInterrupt left an ``exec`` of a string, though ``main`` caught it. This is how one
    Ctrl-C in about 25 while loading ended (a dataclass was being defined at import)."""
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "driver"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "duplexcadence: interrupted"


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
    result = run(code, timeout=120, memory=1 << 30, fresh=True)  # this image's own peak
    assert_clean(result)
    periods, peak_mib = map(int, result.stdout.split())
    assert periods == 3_600 and peak_mib < 150, result.stdout

"""A device that vanishes mid-session: silence and counters, never an exception; reopen() recovers.

The sound server of a private virtual device is killed under running streams (in a child
process: PortAudio 19.6's ALSA output thread spins after its server dies and cannot be
closed, so the child leaves with os._exit), then restarted, and both streams are reopened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.audio_env import ROOT, SCRIPT, no_audio, start_virtual_audio, stop_virtual_audio

pytestmark = pytest.mark.audio

CHILD = r"""
import json, os, signal, subprocess, sys, time
import numpy as np
from app.audio import DeviceSink, DeviceSource

rundir, script = sys.argv[1], sys.argv[2]
tone = (0.3 * np.sin(2 * np.pi * 500 * np.arange(24000) / 24000)).astype(np.float32)
src = DeviceSource("pipewire", lost_after_s=1.0)
snk = DeviceSink("pipewire", lost_after_s=1.0)
src.start(); snk.start()
out = {}
snk.write(tone)
out["before"] = float(np.abs(src.read_period(16000, timeout=3.0)).max())

os.kill(int(open(os.path.join(rundir, "pipewire.pid")).read()), signal.SIGKILL)
t0 = time.monotonic()
while time.monotonic() - t0 < 6.0 and not (src.stats.lost and snk.stats.lost):
    block = src.read_period(1600, timeout=0.5)
    assert block is not None and block.shape == (1600,) and block.dtype == np.float32
    snk.write(np.zeros(2400, np.float32))
out["lost"] = [src.stats.lost, snk.stats.lost]
out["detected_s"] = time.monotonic() - t0
t1 = time.monotonic()
block = src.read_period(1600)
out["lost_read"] = [float(np.abs(block).max()), time.monotonic() - t1]
snk.write(tone)
out["levels_lost"] = [src.level, snk.level]

env = dict(os.environ, DUPLEXCADENCE_AUDIO_DIR=rundir)
subprocess.run([script], env=env, check=True, capture_output=True, timeout=60)
src.reopen(); snk.reopen()
out["lost_after_reopen"] = [src.stats.lost, snk.stats.lost]
snk.write(tone)
out["after"] = float(np.abs(src.read_period(16000, timeout=3.0)).max())
print(json.dumps(out), flush=True)
os._exit(0)
"""


Private = tuple[Path, dict[str, str]]  # the runtime folder and the script's exports


@pytest.fixture
def private_device(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Private]:
    """A virtual device of this test's own (killing the shared one would hurt other tests)."""
    rundir = tmp_path_factory.mktemp("pw")
    problem, exports = "", {}
    try:
        exports = start_virtual_audio(rundir)
    except RuntimeError as exc:
        problem = f"no virtual audio device: {exc}"
    if problem:
        no_audio(problem)
    yield rundir, exports
    stop_virtual_audio(rundir)


def test_a_vanished_device_gives_silence_and_reopen_recovers(
    private_device: Private,
) -> None:
    rundir, exports = private_device
    env = {**os.environ, **exports, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(rundir), str(SCRIPT)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # PortAudio prints an error line per spin of its dead thread
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"child failed (rc {done.returncode}): {done.stdout[-2000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\ndevice loss: {out}")
    assert out["before"] > 0.1
    assert out["lost"] == [True, True]
    assert out["detected_s"] < 4.0
    silent, took = out["lost_read"]
    assert silent == 0.0 and 0.05 < took < 0.5  # zeros, paced to the 0.1-s period
    assert out["levels_lost"] == [-120.0, -120.0]
    assert out["lost_after_reopen"] == [False, False]
    assert out["after"] > 0.1  # sound flows again through the restarted server

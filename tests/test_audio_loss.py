"""A device that vanishes mid-session: DeviceLost on the next read or write; reopen() recovers.

The sound server of a private virtual device is killed under running streams (in a child
process, so the PortAudio thread that spins after its server dies stays there), then restarted,
and both streams are reopened. The child then ends like the app does, through interpreter exit:
that exit once hung forever (sounddevice's Pa_Terminate joined the spinning thread), so it is
part of the test. Every wait is bounded: the child's Python errors come back on stdout (its
stderr, where PortAudio prints a line per spin, is dropped), and a child that overruns
``CHILD_TIMEOUT_S`` fails the test with what it printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.audio_env import ROOT, SCRIPT, no_audio, start_virtual_audio, stop_virtual_audio

CHILD_TIMEOUT_S = 60  # the child takes about 10 s on a loaded 2-core machine
# The last line only: a PortAudio call blocked in C is beyond the signal method.
pytestmark = [pytest.mark.audio, pytest.mark.timeout(2 * CHILD_TIMEOUT_S, method="thread")]

CHILD = r"""
import json, os, signal, subprocess, sys, time
import numpy as np
from app.audio import DeviceLost, DeviceSink, DeviceSource

sys.stderr = sys.stdout  # Python's errors reach the test; PortAudio's spam stays on fd 2
rundir, script = sys.argv[1], sys.argv[2]


def virtual_audio(*args):
    env = dict(os.environ, DUPLEXCADENCE_AUDIO_DIR=rundir)
    done = subprocess.run([script, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"virtual_audio.sh {' '.join(args)}: {done.stderr.strip()}"


tone = (0.3 * np.sin(2 * np.pi * 500 * np.arange(24000) / 24000)).astype(np.float32)
src = DeviceSource("pipewire")
snk = DeviceSink("pipewire")
src.start(); snk.start()
out = {}
snk.write(tone)
out["before"] = float(np.abs(src.read_period(16000, timeout=3.0)).max())

os.kill(int(open(os.path.join(rundir, "pipewire.pid")).read()), signal.SIGKILL)
t0 = time.monotonic()
said = []
while time.monotonic() - t0 < 6.0 and not (src.stats.lost and snk.stats.lost):
    for call in (lambda: src.read_period(1600, timeout=0.5),
                 lambda: snk.write(np.zeros(2400, np.float32))):
        try:
            call()
        except DeviceLost as error:
            said.append(str(error))
out["lost"] = [src.stats.lost, snk.stats.lost]
out["detected_s"] = time.monotonic() - t0
out["said"] = sorted(set(said))
t1 = time.monotonic()
try:
    src.read_period(1600)
    out["lost_read"] = "no exception"
except DeviceLost:
    out["lost_read"] = time.monotonic() - t1
out["levels_lost"] = [src.level, snk.level]

virtual_audio("--stop")  # waits until the killed server is gone: a restart must not find it
virtual_audio()
src.reopen(); snk.reopen()
out["lost_after_reopen"] = [src.stats.lost, snk.stats.lost]
snk.write(tone)
out["after"] = float(np.abs(src.read_period(16000, timeout=3.0)).max())
out["abandoned"] = [src.stats.abandoned, snk.stats.abandoned]
out["exiting_at"] = time.time()
print(json.dumps(out), flush=True)
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


def test_a_vanished_device_is_said_and_reopen_recovers(
    private_device: Private,
) -> None:
    rundir, exports = private_device
    env = {**os.environ, **exports, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(rundir), str(SCRIPT)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # PortAudio prints an error line per spin of its dead thread
            text=True,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        printed = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(f"the child hung past {CHILD_TIMEOUT_S} s; it printed: {printed!r}")
    ended_at = time.time()
    assert done.returncode == 0, f"child failed (rc {done.returncode}): {done.stdout[-2000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\ndevice loss: {out}")
    assert ended_at - out["exiting_at"] < 10.0  # exit does not wait on the stuck PortAudio thread
    assert out["before"] > 0.1
    assert out["lost"] == [True, True]
    assert out["detected_s"] < 1.5  # callbacks stopped for lost_after_s (0.5 s), or finished
    assert [said.split(" ")[1] for said in out["said"]] == ["microphone", "speaker"], out["said"]
    # said again at once: a read that waited would wait for the stall detector (lost_after_s,
    # 0.5 s) first; 0.1 s was the bound, which a busy host's scheduling alone can reach
    assert out["lost_read"] < 0.4
    assert out["levels_lost"] == [-120.0, -120.0]
    assert out["lost_after_reopen"] == [False, False]
    assert out["after"] > 0.1  # sound flows again through the restarted server

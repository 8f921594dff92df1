"""The sound server stops mid-conversation: one plain line, every stream closed, no spin, no
flood; Start works again once the server is back.

A private PipeWire (``scripts/virtual_audio.sh`` in a folder of this test's own) is stopped under
a running conversation, as a user's sound server stops, then started again. PortAudio 19.6's
ALSA thread of the output stream then loops on a failed assertion, printing its line each time
(~35 million lines a minute before: 88 MB/s to the terminal, a core busy, through Stop and
into the next conversation). Both the headless command and the window's engine thread (the
session object the window drives) are run in child processes, so what is left of PortAudio
there ends with them. Every wait is bounded.
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

from tests.audio_env import ROOT, no_audio, start_virtual_audio, stop_virtual_audio

pytestmark = [pytest.mark.audio, pytest.mark.timeout(400, method="thread")]

LOST = "stopped (unplugged, or its sound server stopped): reconnect it or restart the sound server"
STDERR_BOUND = 64 << 10  # bytes a whole run may print; the flood printed 88 MB a second

Private = tuple[Path, dict[str, str]]


@pytest.fixture
def private_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Private]:
    rundir = tmp_path_factory.mktemp("pw")
    try:
        exports = start_virtual_audio(rundir)
    except RuntimeError as exc:
        no_audio(f"no virtual audio device: {exc}")
    yield rundir, exports
    stop_virtual_audio(rundir)


def converse_args(seconds: int) -> list[str]:
    argv = [sys.executable, "-m", "app.cli", "converse", "--headless", "--family", "synthetic"]
    argv += ["--device", "cpu", "--input-device", "pipewire", "--output-device", "pipewire"]
    return [*argv, "--seconds", str(seconds)]


def wait_for(path: Path, text: str, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} within {limit_s} s: {path.read_text()[-2000:]}")


def test_converse_ends_with_one_line_and_runs_again_once_the_server_is_back(
    private_server: Private, tmp_path: Path
) -> None:
    rundir, exports = private_server
    env = {**os.environ, **exports, "PYTHONPATH": str(ROOT)}
    err = tmp_path / "stderr.txt"
    with err.open("wb") as sink:
        child = subprocess.Popen(converse_args(120), env=env, cwd=ROOT, stderr=sink, stdout=sink)
        try:
            wait_for(err, " 3/120 periods", 180)  # loaded, and the devices run
            stop_virtual_audio(rundir)  # returns once the server is gone
            stopped = time.monotonic()
            wait_for(err, "duplexcadence converse: audio:", 30)
            took = time.monotonic() - stopped  # the process then exits as usual (torch: seconds)
            rc = child.wait(timeout=60)
        finally:
            child.kill()
    printed = err.read_bytes()
    text = printed.decode(errors="replace")
    lines = [line for line in text.splitlines() if "duplexcadence converse:" in line]
    print(f"\nsaid {took:.2f} s after the server stopped; {len(printed)} bytes on stderr; {lines}")
    assert rc == 2 and len(lines) == 1 and LOST in lines[0], text[-3000:]
    assert "'pipewire'" in lines[0]
    assert took < 2.0  # found within lost_after_s; no close waits on the dead server
    assert len(printed) < STDERR_BOUND
    start_virtual_audio(rundir)
    again = subprocess.run(
        converse_args(3), env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["periods"] == 3


APP = r"""
import json, os, resource, sys, time
from PySide6.QtCore import QCoreApplication
from app.gui.worker.feed import Feed
from app.gui.worker.routes import AudioRoute
from app.gui.worker.worker import EngineThread
from app.settings import Settings

app = QCoreApplication([])
settings = Settings(family="synthetic", device="cpu", input_device="pipewire",
                    output_device="pipewire")


def cpu():
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def conversation(stop_server):
    feed, seen = Feed(), {}
    thread = EngineThread(settings, AudioRoute(), None, feed)
    thread.failed.connect(lambda text: seen.setdefault("failed", (text, time.monotonic())))
    thread.ended.connect(lambda why: seen.setdefault("ended", why))
    thread.start()
    periods, deadline = 0, time.monotonic() + 240
    while "ended" not in seen and time.monotonic() < deadline:
        app.processEvents()
        periods += len(feed.drain())
        if periods >= 3 and stop_server and "stopped_at" not in seen:
            print("stop", flush=True)
            sys.stdin.readline()  # the parent stopped the server
            seen["stopped_at"] = time.monotonic()
        if periods >= 3 and not stop_server:
            thread.request_stop()
        time.sleep(0.02)
    thread.wait(30_000)
    app.processEvents()
    return seen, periods


seen, _ = conversation(stop_server=True)
text, at = seen.get("failed", ("", 0.0))
before = cpu()
time.sleep(2.0)
idle = cpu() - before
print(json.dumps({"failed": text, "after_s": at - seen.get("stopped_at", at),
                  "ended": seen.get("ended"), "cpu_2s": idle}), flush=True)
sys.stdin.readline()  # the parent started the server again
seen, periods = conversation(stop_server=False)
print(json.dumps({"again": seen.get("ended"), "failed_again": seen.get("failed"),
                  "periods": periods}), flush=True)
"""


def test_the_window_session_says_which_device_stopped_and_starts_again(
    private_server: Private, tmp_path: Path
) -> None:
    rundir, exports = private_server
    env = {**os.environ, **exports, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    err = tmp_path / "stderr.txt"
    with err.open("wb") as errors:
        child = subprocess.Popen(
            [sys.executable, "-c", APP], env=env, cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "stop", err.read_text()[-3000:]
            stop_virtual_audio(rundir)
            child.stdin.write("stopped\n")
            child.stdin.flush()
            first = json.loads(child.stdout.readline())
            start_virtual_audio(rundir)
            child.stdin.write("started\n")
            child.stdin.flush()
            second = json.loads(child.stdout.readline())
            rc = child.wait(timeout=60)
        finally:
            child.kill()
    printed = err.read_bytes()
    print(f"\nwindow session: {first} {second}; {len(printed)} bytes on stderr")
    assert LOST in first["failed"] and "'pipewire'" in first["failed"], first
    assert first["failed"][0].isupper() and "\n" not in first["failed"]
    assert first["ended"] == "failed" and first["after_s"] < 3.0
    assert first["cpu_2s"] < 0.3  # idle: nothing spins once the conversation ended
    assert second["again"] == "stopped" and second["failed_again"] is None
    assert second["periods"] >= 3
    assert rc == 0 and len(printed) < STDERR_BOUND
    assert "Traceback" not in printed.decode(errors="replace")

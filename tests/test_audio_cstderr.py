"""PortAudio's own stderr lines: rate-limited, and a thread that prints in a loop parked.

A C thread (ctypes ``fputs`` on the C library's ``stderr``, as PortAudio's ``PaUtil_DebugPrint``
writes) prints one line in a loop, as PortAudio 19.6's ALSA thread does once its sound server is
gone; in a child process, since the parked thread stays there for good."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.audio_env import ROOT

CHILD = r"""
import ctypes, json, os, resource, sys, threading, time
from app.audio.cstderr import capture_c_stderr, parked

log = sys.argv[1]  # where fd 2 goes: read back to see a line passed on

assert capture_c_stderr() and capture_c_stderr()  # idempotent
libc = ctypes.CDLL(None)
libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]


def line(text):  # as C code does: the stderr pointer read at every call
    libc.fputs(text, ctypes.c_void_p.in_dll(libc, "stderr"))


def cpu():
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


line(b"a line now and then\n")
spin = threading.Thread(target=lambda: [line(b"Expression 'x' failed\n") for _ in iter(int, 1)],
                        daemon=True)
spin.start()
deadline = time.monotonic() + 20
while not parked() and time.monotonic() < deadline:
    time.sleep(0.05)
before = cpu()
time.sleep(1.0)
out = {"parked": parked(), "spinning": spin.is_alive(), "cpu_1s": cpu() - before}
line(b"after the flood\n")
deadline = time.monotonic() + 20  # the forwarder passes it on in its own time: wait for it
while b"after the flood" not in open(log, "rb").read() and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps(out), flush=True)
"""


def test_a_thread_printing_in_a_loop_is_parked_and_the_log_stays_small(tmp_path: Path) -> None:
    log = tmp_path / "stderr.txt"
    with log.open("wb") as errors:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(log)],
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            timeout=60,
        )
    stderr = log.read_text()
    assert done.returncode == 0, stderr[-2000:]
    out = json.loads(done.stdout)
    lines = stderr.splitlines()
    print(f"\n{out}; {len(stderr)} bytes: {lines}")
    assert out["parked"] == 1 and out["spinning"]  # alive, blocked in write
    assert out["cpu_1s"] < 0.2  # CPU seconds, not wall time: a spinning thread takes ~1.0
    assert lines[0] == "a line now and then"
    assert lines.count("Expression 'x' failed") == 3  # the same line at most REPEATS times
    assert len(lines) < 10
    assert any("parked, silent and idle" in text for text in lines)
    assert lines[-1] == "after the flood"  # the other writers still reach fd 2
    assert len(stderr) < 2000

"""PortAudio's own stderr lines: rate-limited, and a thread that prints in a loop parked.

A C thread (ctypes ``fputs`` on the C library's ``stderr``, as PortAudio's ``PaUtil_DebugPrint``
writes) prints one line in a loop, as PortAudio 19.6's ALSA thread does once its sound server is
gone; in a child process, since the parked thread stays there for good."""

from __future__ import annotations

import subprocess
import sys

from tests.audio_env import ROOT

CHILD = r"""
import ctypes, json, os, resource, threading, time
from app.audio.cstderr import capture_c_stderr, parked

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
time.sleep(0.3)
print(json.dumps(out), flush=True)
"""


def test_a_thread_printing_in_a_loop_is_parked_and_the_log_stays_small() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    out = json.loads(done.stdout)
    lines = done.stderr.splitlines()
    print(f"\n{out}; {len(done.stderr)} bytes: {lines}")
    assert out["parked"] == 1 and out["spinning"]  # alive, blocked in write
    assert out["cpu_1s"] < 0.2
    assert lines[0] == "a line now and then"
    assert lines.count("Expression 'x' failed") == 3  # the same line at most REPEATS times
    assert len(lines) < 10
    assert any("parked, silent and idle" in text for text in lines)
    assert lines[-1] == "after the flood"  # the other writers still reach fd 2
    assert len(done.stderr) < 2000

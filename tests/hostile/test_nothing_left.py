"""Nothing left running (issue 27, "Deliver" 6): ``converse`` and ``demo`` leave no audio stream,
worker thread or process behind, whether they end by themselves, by Ctrl-C (SIGINT) or by SIGTERM
(exit 143).

Each run is the real command in a child, in a session of its own; a signal is sent by the child
to itself at the start of its third period's trace line (exact, no timer). Once ``main`` returns,
the child reports what is still alive in it: Python threads other than the main one (the
C-stderr forwarder, which lives as long as the process by design, excepted), streams the audio
package holds open, child processes. After it exits, no process of its session may remain.
The converse runs are handed their model as loaded (:func:`tests.hostile.child.run`, ``shared``;
the zygote refuses a load that left a thread); demo loads its own, so what a load starts and
leaves behind is still looked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import cli
from app.demo import write_talk
from tests.hostile.child import run
from tests.hostile.whole import converse_argv

REPORT = """
import json, multiprocessing, os, signal, threading
from engine.trace import TraceWriter

original, calls = TraceWriter.write, [0]

def write(self, record):
    calls[0] += 1
    if calls[0] == 3 and {signal!r}:
        os.kill(os.getpid(), getattr(signal, {signal!r}))
    return original(self, record)

TraceWriter.write = write
from app.cli import main
status = main({argv!r})
from app.audio import devices
threads = [t.name for t in threading.enumerate()
           if t is not threading.main_thread() and t.name != "c-stderr" and t.is_alive()]
left = {{"status": status, "threads": threads, "streams": len(devices._open_streams),
        "children": [p.pid for p in multiprocessing.active_children()], "sid": os.getsid(0)}}
print("LEFT " + json.dumps(left), file=sys.stderr)
sys.exit(status)
"""


def _session_members(sid: int) -> list[int]:
    """Pids whose session is ``sid`` (the child started one of its own)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


CASES = {
    "converse ends": ("converse", "", cli.EXIT_OK),
    "converse Ctrl-C": ("converse", "SIGINT", cli.EXIT_OK),  # ends like the input's end
    "converse SIGTERM": ("converse", "SIGTERM", cli.EXIT_TERMINATED),
    "demo SIGTERM": ("demo", "SIGTERM", cli.EXIT_TERMINATED),
}


@pytest.mark.parametrize("case", list(CASES))
def test_nothing_is_left_running(tmp_path: Path, case: str) -> None:
    command, sent, status = CASES[case]
    if command == "converse":
        talk = write_talk(tmp_path / "talk.wav", 4)
        (tmp_path / "run").mkdir()
        argv = converse_argv(tmp_path / "run", talk, "--seconds", "4", "--quiet")
    else:
        argv = ["demo", "--seconds", "4", "--family", "synthetic", "--device", "cpu"]
        argv += ["--out", str(tmp_path / "demo")]
    code = "import os\nos.setsid()\n" + REPORT.format(signal=sent, argv=argv)
    shared = argv if command == "converse" else None  # the model handed over as loaded
    done = run(code, cwd=tmp_path, timeout=240, shared=shared)
    lines = [line for line in done.stderr.splitlines() if line.startswith("LEFT ")]
    assert lines, done.stderr[-3000:]
    left = json.loads(lines[-1].removeprefix("LEFT "))
    sid = left.pop("sid")
    assert left == {"status": status, "threads": [], "streams": 0, "children": []}, left
    assert done.returncode == status, done.stderr[-2000:]
    assert _session_members(sid) == []  # the child has exited: nothing of its session runs

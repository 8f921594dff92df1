"""The conversation's trace: one durable JSONL line per period, readable after a SIGKILL.

A child process runs a session (small model, CPU) on looping speech and prints each period's
index once ``step`` has returned; the parent kills it with SIGKILL mid-conversation. Every
period the child reported is in the trace, at most the one in flight is missing, and the trace
reads, exports to Perfetto (structure validated) and to CSV.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.trace import read_trace
from engine.trace_export import export_csv, export_perfetto, validate_chrome_trace
from tests.speech import espeak_binary

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")

CHILD = textwrap.dedent(
    """
    import sys, torch
    torch.set_num_threads(1)
    from app.session import build_session
    from app.settings import Settings
    from engine.arms import Arm
    from tests.speech import conversation

    talk = conversation([0.3, "hello there, how are you doing today", 2.0]).periods()
    session = build_session(
        Settings(family="synthetic", device="cpu", model_size="small", arm=Arm.SRC),
        trace=sys.argv[1],
        n_steps=2,
    )
    k = 0
    while True:
        if k == 3:
            session.request_arm(Arm.S)
        session.step(talk[k % len(talk)])
        print(k, flush=True)
        k += 1
    """
)


def test_a_killed_session_loses_at_most_the_period_in_flight(tmp_path: Path) -> None:
    espeak_binary()
    trace = tmp_path / "session.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(trace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 400  # a hang guard: torch, a build, 8 periods
        reported = 0
        while reported < 8 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            reported = int(line) + 1
    finally:
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
    reported = max([reported, *(int(x) + 1 for x in rest.split())])
    assert child.returncode == -signal.SIGKILL
    assert reported >= 8, "the child did not get going: run it by hand to see why"

    header, records = read_trace(trace)
    assert [r["index"] for r in records] == list(range(len(records)))
    assert reported <= len(records) <= reported + 1
    assert header["settings"]["model_size"] == "small" and header["output_rate"] == 24_000
    assert {r["loop"]["phase"] for r in records} <= {"listen", "speak"}
    assert records[3]["arm"] == "S" and records[2]["arm"] == "SRc"
    assert any(e["kind"] == "arm_switch" for e in records[3]["events"])

    perfetto = export_perfetto(trace, tmp_path / "session.json")
    validate_chrome_trace(json.loads(perfetto.read_text()))
    rows = export_csv(trace, tmp_path / "session.csv").read_text().splitlines()
    assert len(rows) == len(records) + 1 and "op_ms.backbone" in rows[0]


def test_call_kinds_reach_the_trace(tmp_path: Path) -> None:
    from app.session import build_session
    from app.settings import Settings
    from tests.speech import conversation

    talk = conversation([0.3, "hello there, how are you doing today", 9.0]).periods()
    path = tmp_path / "t.jsonl"
    session = build_session(
        Settings(family="synthetic", device="cpu", model_size="small"), trace=path, n_steps=2
    )
    for mic in talk:
        session.step(mic)
    session.close()
    _, records = read_trace(path)
    kinds = [c["kind"] for r in records for c in r["loop"]["calls"]]
    assert kinds[0] == "flush" and "steady" in kinds and kinds[-1] == "last"

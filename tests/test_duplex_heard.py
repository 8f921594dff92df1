"""Both sides of the text through the loop: what the user said (``heard``, where a family runs
a recognizer) and what the assistant said (``text``) reach the outcome, the JSONL trace, the
Perfetto export and the CSV, each in the period it became known."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import torch

from engine.arms import Arm
from engine.duplex import DuplexLoop, PeriodStep, Phase
from engine.metrics import Metrics
from engine.trace import TraceWriter, read_trace, session_metadata
from engine.trace_export import export_csv, export_perfetto

PERIOD_S, RATE = 0.1, 1000
SIDES = {1: ("what is the weather", ""), 2: ("", " It is sunny."), 3: ("", " Enjoy it.")}


class _Recognizing:
    """A period model that hears one question in period 1 and answers in periods 2 and 3."""

    period_s, input_rate, output_rate = PERIOD_S, RATE, RATE

    def __init__(self) -> None:
        self.index = 0

    @property
    def arm(self) -> Arm:
        return Arm.EAGER

    def set_arm(self, arm: Arm) -> None:
        pass

    @property
    def in_turn(self) -> bool:
        return False

    def step(self, mic: np.ndarray) -> PeriodStep:
        heard, said = SIDES.get(self.index, ("", ""))
        self.index += 1
        phase = Phase.SPEAK if said else Phase.LISTEN
        audio = (torch.full((100,), 0.1),) if said else ()
        return PeriodStep(phase, audio, text=said, heard=heard)

    def reset(self) -> None:
        self.index = 0


def test_heard_and_said_reach_the_outcome_the_trace_and_the_exports(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    meta = session_metadata(declaration="toy", arm="eager")
    writer = TraceWriter(jsonl, meta)
    loop = DuplexLoop(_Recognizing(), Metrics(PERIOD_S), None, writer)
    outcomes = [loop.step(np.zeros(100, np.float32)) for _ in range(5)]
    writer.close()

    assert [o.heard for o in outcomes] == ["", "what is the weather", "", "", ""]
    assert "".join(o.text for o in outcomes) == " It is sunny. Enjoy it."
    _, records = read_trace(jsonl)
    assert [r["loop"].get("heard", "") for r in records][1] == "what is the weather"
    assert "heard" not in records[0]["loop"] and "heard" not in records[2]["loop"]

    chrome = json.loads(export_perfetto(jsonl, tmp_path / "t.json").read_text())
    periods = [e["args"] for e in chrome["traceEvents"] if e.get("name") == "period"]
    assert periods[1]["heard"] == "what is the weather" and periods[2]["text"] == " It is sunny."
    with export_csv(jsonl, tmp_path / "t.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows[1]["loop.heard"] == "what is the weather"

"""What an interrupted ``converse`` must leave: a whole JSONL, WAVs with every period it holds.

:func:`converse_argv` is the run the interrupt tests stop (synthetic family, small, CPU, a
simulated clock, outputs ``o.wav`` and ``t.json``/``.jsonl``/``.csv`` in one folder);
:func:`assert_whole` checks what it left, strictly: every JSONL line parses (none cut), the
periods are numbered from 0 without a gap, every WAV opens with ``soundfile`` and holds exactly
one period of audio per period line, no temporary file is left, and the Perfetto and CSV exports
are either whole or absent (then ``duplexcadence export``'s functions rebuild them).
"""

from __future__ import annotations

import json
from pathlib import Path

import soundfile

from engine.trace_export import export_csv, export_perfetto, validate_chrome_trace

RATES = {"o.wav": 24_000, "rec/mic.wav": 16_000, "rec/assistant.wav": 24_000}


def converse_argv(folder: Path, talk: Path, *extra: str) -> list[str]:
    return [
        "converse", "--headless", "--input", str(talk), "--output", str(folder / "o.wav"),
        "--trace", str(folder / "t.json"), "--family", "synthetic", "--device", "cpu",
        "--model-size", "small", *extra,
    ]  # fmt: skip


def assert_whole(folder: Path) -> int:
    """Check the run's files in ``folder`` (see the module); returns the periods written."""
    lines = (folder / "t.jsonl").read_text().splitlines()
    objects = [json.loads(line) for line in lines]  # every line parses: nothing cut
    assert objects and objects[0]["type"] == "header", lines[:1]
    indices = [o["index"] for o in objects[1:] if o["type"] == "period"]
    periods = len(indices)
    assert indices == list(range(periods)) and len(objects) == periods + 1
    for name, rate in RATES.items():
        if (folder / name).exists():
            audio, found = soundfile.read(folder / name, dtype="float32")
            assert (found, len(audio)) == (rate, periods * rate), name
    assert not list(folder.rglob(".*.tmp")), sorted(folder.rglob(".*.tmp"))
    perfetto, table = folder / "t.json", folder / "t.csv"
    if perfetto.exists():
        validate_chrome_trace(json.loads(perfetto.read_text()))
    else:
        export_perfetto(folder / "t.jsonl", perfetto, overwrite=False)
    if table.exists():
        assert table.read_text().count("\n") == periods + 1
    else:
        export_csv(folder / "t.jsonl", table, overwrite=False)
    return periods

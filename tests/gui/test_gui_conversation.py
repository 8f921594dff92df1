"""A conversation through the window: start, talk (a WAV as the microphone), switch arm, export,
stop — with the real session on the engine thread, the small CPU model and espeak-ng speech."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import soundfile as sf
from pytestqt.qtbot import QtBot

from app.gui.export.writers import ExportKind
from engine.arms import Arm
from engine.trace import read_trace
from engine.trace_export import validate_chrome_trace
from tests.gui.conftest import SESSION_MS

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def _periods(window: MainWindow) -> int:
    return len(window.panel.history)


def test_talk_switch_arm_export_and_stop(
    make_window: Callable[..., MainWindow], qtbot: QtBot, tmp_path: Path
) -> None:
    window = make_window(realtime=True)
    with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS) as ready:
        window.start_conversation()
    info = ready.args[0]
    assert info.weights_synthetic and info.device == "cpu" and info.arm == "SRc"
    assert window.session_card.value("model").startswith("MiniCPM-o 4.5 Token2Wav")
    assert "(small, seeded random weights)" in window.session_card.value("model")
    assert window.banner.isVisible()

    qtbot.waitUntil(lambda: _periods(window) >= 3, timeout=SESSION_MS)
    window.switch_arm(Arm.EAGER)  # what the toolbar's arm box does
    switched_at = _periods(window)
    qtbot.waitUntil(lambda: _periods(window) >= switched_at + 3, timeout=SESSION_MS)

    # Export mid-conversation: it runs on a pool thread and the periods keep coming.
    out = tmp_path / "export"
    out.mkdir()
    with qtbot.waitSignal(window.exports.done, timeout=SESSION_MS) as done:
        window.exports.export_to(out, "mid", list(ExportKind))
    assert len(done.args[0]) == len(ExportKind)
    during = _periods(window)
    qtbot.waitUntil(lambda: _periods(window) >= during + 1, timeout=SESSION_MS)

    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS) as ended:
        window.stop_conversation()
    assert ended.args == ["stopped"] and window.controller.state.value == "idle"
    assert window.error_strip.text() == ""

    history = window.panel.history
    views = history.window(1e9)
    assert [v.index for v in views] == list(range(len(views)))  # none lost on the way
    assert {"SRc", "eager"} <= {v.arm for v in views}
    assert [d for _, d in history.arm_switches] == ["SRc -> eager"]
    assert window.panel.markers.count == 1  # marked on the charts
    assert {"backbone", "flow", "vocoder"} <= set(history.stages)
    assert "speak" in {v.phase for v in views}, "the assistant never answered the talk"

    # The trace records the switch, in the period it took effect.
    assert window.controller.trace is not None
    header, records = read_trace(window.controller.trace)
    assert header["settings"]["model_size"] == "small"
    switches = [(r["index"], e) for r in records for e in r["events"] if e["kind"] == "arm_switch"]
    assert len(switches) == 1 and switches[0][1]["detail"] == "SRc -> eager"
    index = switches[0][0]
    assert records[index]["arm"] == "eager" and records[index - 1]["arm"] == "SRc"

    _check_export(window, out, len(records))


def _check_export(window: MainWindow, out: Path, periods: int) -> None:
    """A full export after Stop: every file parses, and Perfetto's structure holds."""
    with_stop = out / "final"
    with_stop.mkdir()
    from PySide6.QtTest import QSignalSpy

    spy = QSignalSpy(window.exports.done)
    window.exports.export_to(with_stop, "session", list(ExportKind))
    assert spy.wait(60_000)
    names = sorted(p.name for p in with_stop.iterdir())
    assert names == sorted(
        [
            "session.json",
            "session.csv",
            "session.jsonl",
            "session-mic.wav",
            "session-assistant.wav",
            "session.transcript.txt",
        ]
    )  # and no temporary files left behind
    chrome = json.loads((with_stop / "session.json").read_text())
    validate_chrome_trace(chrome)
    assert any(e["name"] == "arm_switch" for e in chrome["traceEvents"])
    rows = list(csv.DictReader((with_stop / "session.csv").open()))
    assert len(rows) == periods and {r["arm"] for r in rows} == {"SRc", "eager"}
    _, records = read_trace(with_stop / "session.jsonl")
    assert len(records) == periods
    mic, mic_rate = sf.read(with_stop / "session-mic.wav")
    voice, voice_rate = sf.read(with_stop / "session-assistant.wav")
    assert (mic_rate, voice_rate) == (16000, 24000)
    assert len(mic) == periods * 16000 and len(voice) == periods * 24000
    assert abs(mic).max() > 0.05 and abs(voice).max() > 0.01  # the talk, and the answer
    assert (with_stop / "session.transcript.txt").read_text() == ""  # this family has no text


def test_stop_while_loading_ends_cleanly(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    window = make_window()
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS) as ended:
        window.start_conversation()
        window.stop_conversation()
    assert ended.args == ["stopped"]
    assert window.error_strip.text() == "" and _periods(window) == 0
    assert window.toolbar.start_button.text().endswith("Start")

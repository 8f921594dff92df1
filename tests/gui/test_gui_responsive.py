"""The window keeps painting while the engine thread loads the model and captures its graphs.

A 10 ms QTimer probe measures how late the GUI event loop runs (``app.gui.probe``). The first
session in a process pays one-off costs that hold the interpreter lock whatever thread runs them
(importing torch's extensions, loading silero-vad's TorchScript archive): a first session warms
the process, then the second build — weights, warm-up and capture, all of it — is measured, from
Start to the session being ready (the model Stop keeps loaded is dropped in between, or the
second Start would build nothing).

What is asserted is the cause, not the machine's speed: the event loop runs all through the
build, never held up for a sizeable share of it. A stage run on the GUI thread, or an engine
call that holds the interpreter lock through a stage, stops the probe for that whole stage
(seconds); a busy machine delays ticks by its scheduling and slows the build alike (at load 9 on
2 cores: the longest hold 151 ms of a 34-s build, 0.4%; the first build's one-off imports held
it 2.4 s of 54 s, 4.4%). How late the probe runs against the issue's 50-ms bar is a speed
figure: bench/gui_latency.py measures it beside the idle window's floor; the test prints it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

from tests.gui.conftest import SESSION_MS

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui

HELD_SHARE = 0.1  # the longest the loop may stand still, as a share of the build


def test_the_event_loop_runs_all_through_load_and_capture(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    window = make_window()
    stages: set[str] = set()
    window.controller.progress.connect(lambda stage, _: stages.add(stage))
    for attempt in ("warm-up", "measured"):
        qtbot.wait(300)  # let the last session's final chart update paint before measuring
        window.probe.reset()
        stages.clear()
        started = time.perf_counter()
        with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS):
            window.start_conversation()
        build_s = time.perf_counter() - started
        late = sorted(window.probe.samples)
        with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
            window.stop_conversation()
        if attempt == "warm-up":
            window.controller.unload()  # Stop keeps the model: the next Start would reuse it
    assert {"loading", "capture"} <= stages, f"the measured Start built nothing: {stages}"
    held_s = (late[-1] if late else build_s * 1e3) / 1e3 + window.probe.interval_s
    print(
        f"\nbuild {build_s:.2f} s: the probe ticked {len(late)} times, p50 "
        f"{late[len(late) // 2] if late else 0:.1f} ms late, the longest hold {held_s * 1e3:.0f} ms"
    )
    assert len(late) >= 20, (
        f"the probe ran {len(late)} times during a {build_s:.2f}-s build: the build ran on the "
        "GUI thread, or something held it up"
    )
    assert held_s < HELD_SHARE * build_s, (
        f"the GUI stood still for {held_s:.2f} s of a {build_s:.2f}-s build (model load and "
        "capture): something blocks the GUI thread or holds the interpreter lock on the engine "
        "thread through a stage"
    )

"""The window keeps painting while the engine thread loads the model and captures its graphs.

A 10 ms QTimer probe measures how late the GUI event loop runs (``app.gui.probe``); the issue's
bar is 50 ms. The first session in a process pays one-off costs that hold the interpreter lock
whatever thread runs them (importing torch's extensions, loading silero-vad's TorchScript
archive): a first session warms the process, then the second build — weights, warm-up and
capture, all of it — is measured, from Start to the session being ready (the model Stop keeps
loaded is dropped in between, or the second Start would build nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui

BUDGET_MS = 50.0


def test_event_loop_latency_stays_under_50ms_during_load_and_capture(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    window = make_window()
    stages: set[str] = set()
    window.controller.progress.connect(lambda stage, _: stages.add(stage))
    for _attempt in ("warm-up", "measured"):
        qtbot.wait(300)  # let the last session's final chart update paint before measuring
        window.probe.reset()
        started = time.perf_counter()
        with qtbot.waitSignal(window.controller.ready, timeout=60_000):
            window.start_conversation()
        build_s = time.perf_counter() - started
        late = sorted(window.probe.samples)
        with qtbot.waitSignal(window.controller.ended, timeout=60_000):
            window.stop_conversation()
    assert {"loading", "capture"} <= stages
    # A 10-ms probe never more than BUDGET_MS late ticks at least this often during the build;
    # fewer ticks mean the loop was held up longer than any one tick it recorded.
    least = build_s / (0.010 + BUDGET_MS / 1000)
    assert len(late) >= max(5, least), (
        f"the probe ran {len(late)} times during a {build_s:.2f}-s build (at least {least:.0f} "
        "expected): the GUI thread was held up"
    )
    assert late[-1] < BUDGET_MS, (
        f"the GUI froze for {late[-1]:.0f} ms during model load and capture "
        f"(p50 {late[len(late) // 2]:.1f} ms over {len(late)} ticks): something blocks the GUI "
        "thread or holds the interpreter lock on the engine thread"
    )

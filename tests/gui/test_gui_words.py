"""Plain words: what a user cares about (response, headroom, dropouts, the CPU said plainly),
tooltips on every chart, arm names with their meaning, and a lamp that follows the voice."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from app.response import ResponseClock
from engine.arms import Arm
from engine.trace import read_trace
from tests.gui.conftest import SESSION_MS

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def test_response_clock_times_the_first_sound_after_speech() -> None:
    clock = ResponseClock(mic_rate=1000, out_rate=1000)
    talk, quiet = np.full(1000, 0.3, np.float32), np.zeros(1000, np.float32)
    talk[600:] = 0.0  # speech ends 0.6 s into the period starting at t = 2

    def at(start: float) -> Callable[[float], float]:
        return lambda k: start + k / 1000

    clock.heard(talk, at(2.0))
    clock.played(quiet, at(3.1))
    assert clock.poll() is None
    answer = np.zeros(1000, np.float32)
    answer[200:] = 0.2  # first sound 0.2 s into the audio played from t = 4.1
    clock.heard(quiet, at(3.0))
    clock.played(answer, at(4.1))
    assert clock.poll() == pytest.approx(4.3 - 2.6)
    clock.heard(quiet, at(4.0))
    clock.played(answer, at(5.1))
    assert clock.poll() is None  # one answer, one measure
    # The assistant already talking when the user stops is no answer: no onset after speech.
    clock.heard(talk, at(5.0))
    clock.played(np.full(1000, 0.2, np.float32), at(6.1))
    assert clock.poll() is None


def test_a_cpu_session_says_plainly_what_it_measures(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    window = make_window()
    with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS) as ready:
        window.start_conversation()
    assert ready.args[0].accelerator == "CPU"
    assert window.session_card.value("device") == "CPU (no graphs launched)"
    assert "no graphs are launched" in window.session_card.values["device"].toolTip()
    assert "on the CPU" in window.panel.captures.titleLabel.text
    qtbot.waitUntil(lambda: len(window.panel.history.responses_ms) >= 1, timeout=SESSION_MS)
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
        window.stop_conversation()
    chips = window.panel.summary.chips
    assert chips["response"].value.text().endswith(")")  # "1234 ms (1180)"
    assert chips["headroom"].value.text().endswith("x real time")
    assert chips["dropouts"].value.text() == "0"  # a file and no speaker: none
    assert chips["memory"].value.text().endswith(" (RAM)")  # the CPU's memory, said so
    assert all(view.dropouts == 0 for view in window.panel.history.window(1e9))
    assert 0 < window.panel.history.responses_ms[0] < 10_000
    # The trace carries the same numbers as the window, in the periods that measured them (a
    # file and no speaker: estimated from the queues).
    _, records = read_trace(window.controller.trace)
    traced = [r["loop"] for r in records if "response_ms" in r["loop"]]
    assert [t["response_ms"] for t in traced] == window.panel.history.responses_ms
    assert {t["response_by"] for t in traced} == {"queues"}


def test_every_chart_and_figure_explains_itself_and_arms_say_what_they_mean(
    make_window: Callable[..., MainWindow],
) -> None:
    window = make_window()
    for plot in window.panel.plots:
        assert len(plot.toolTip()) > 40
    for chip in window.panel.summary.chips.values():
        assert len(chip.toolTip()) > 20 and chip.accessibleName()
    arms = window.toolbar.arm
    texts = [arms.itemText(i) for i in range(arms.count())]
    assert "SRc — lean state, one graph per chunk (default)" in texts
    assert all(" — " in text for text in texts) and arms.currentData() == Arm.SRC.value


def test_the_lamp_says_speaking_while_the_voice_still_plays(
    make_window: Callable[..., MainWindow], monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window()
    indicator = window.conversation.indicator
    levels = [(-120.0, -12.0)]
    monkeypatch.setattr(window.controller, "levels_db", lambda: levels[0])
    window._last_phase = "listen"  # the model has stopped speaking ...
    indicator.set_state("listen")
    window._tick()
    assert indicator.text == "Speaking"  # ... but its last words still play
    levels[0] = (-120.0, -120.0)
    window._tick()
    assert indicator.text == "Listening"


def test_a_gpu_session_names_the_gpu_its_size_and_the_memory_peak(
    make_window: Callable[..., MainWindow], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a GPU session shows (no GPU here: torch's answer and the session's facts given)."""
    import dataclasses
    from types import SimpleNamespace

    import torch

    from app.gui.worker.feed import PeriodView
    from app.gui.worker.worker import SessionInfo, _accelerator

    h200 = SimpleNamespace(name="NVIDIA H200", total_memory=round(139.8 * 2**30))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h200)
    accelerator = _accelerator("cuda:0")
    assert accelerator == "NVIDIA H200, 139.8 GiB"
    window = make_window()
    info = SessionInfo(
        model_name="Moshi", device="cuda:0", accelerator=accelerator, weights_synthetic=False,
        output_trim_db=0.0, arm="SRc", period_s=0.08, input_rate=24000, output_rate=24000,
        input_label="mic", output_label="speaker", trace=None,
    )  # fmt: skip
    window.controller.ready.emit(info)
    assert window.session_card.value("device") == "NVIDIA H200, 139.8 GiB"
    assert "on the CPU" not in window.panel.captures.titleLabel.text
    view = PeriodView(0, 0.0, 30.0, 80.0, False, "SRc", "listen", 0.0)
    gpu = {"allocated_bytes": 2**30, "reserved_bytes": 2**31, "peak_bytes": 3 * 2**30}
    window.panel.add([dataclasses.replace(view, memory=gpu)])
    chips = window.panel.summary.chips
    assert chips["memory"].value.text() == "3.00 GiB (GPU)"
    assert chips["headroom"].value.text() == "2.7x real time"  # 80 ms period / 30 ms

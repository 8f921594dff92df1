"""Safe audio in the window: volume, mute, microphone gain and the clip lamps, end to end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from app.audio.limiter import PeakLimiter
from tests.gui.conftest import SESSION_MS

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def _peak_dbfs(samples: np.ndarray) -> float:
    return float(20 * np.log10(max(np.abs(samples.astype(np.float64)).max() / 32767, 1e-9)))


def test_random_weights_play_quietly_and_the_limiter_holds_at_any_volume(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    window = make_window()
    card = window.conversation
    card.volume.setValue(0)
    with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS) as ready:
        window.start_conversation()
    assert ready.args[0].output_trim_db == -20.0
    assert "random weights" in window.session_card.value("output")
    qtbot.waitUntil(lambda: len(window.panel.history) >= 4, timeout=SESSION_MS)
    card.mute.setChecked(True)  # what the user hears from the next period on: nothing
    muted_from = len(window.panel.history) + 1
    qtbot.waitUntil(lambda: len(window.panel.history) >= muted_from + 2, timeout=SESSION_MS)
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
        window.stop_conversation()
    recorder = window.controller.recorder
    assert recorder is not None
    played = recorder.snapshot()[1]
    rate = played.rate
    loud = played.samples[: 4 * rate]
    assert -24.0 < _peak_dbfs(loud) <= -19.0  # the -20 dB trim: noise at a quiet level
    silent = played.samples[(muted_from + 1) * rate : (muted_from + 2) * rate]
    assert silent.size and not silent.any()
    assert np.abs(played.samples).max() / 32767 <= PeakLimiter(rate).ceiling + 1e-4


def test_volume_mute_and_gain_reach_the_engine_and_survive_a_restart(
    make_window: Callable[..., MainWindow],
) -> None:
    first = make_window()
    card, controls = first.conversation, first.controller.controls
    card.volume.setValue(-18)
    card.mic_gain.setValue(6)
    card.mute.setChecked(True)
    assert (controls.volume_db, controls.mic_gain_db, controls.muted) == (-18.0, 6.0, True)
    assert card.volume_value.text() == "-18 dB" and card.gain_value.text() == "+6 dB"
    first.close()
    second = make_window()
    again = second.conversation
    assert (again.volume.value(), again.mic_gain.value(), again.mute.isChecked()) == (-18, 6, True)
    assert second.controller.controls.volume_db == -18.0


def test_the_clip_lamp_lights_stays_lit_and_clears_on_click(
    make_window: Callable[..., MainWindow], qtbot: QtBot, tmp_path: Path
) -> None:
    import soundfile as sf
    from PySide6.QtCore import Qt

    tone = tmp_path / "tone.wav"  # 60 s at -12 dBFS: +20 dB of gain clips from the first period
    sf.write(tone, 0.25 * np.sin(np.arange(60 * 16000) / 9.0), 16000, subtype="PCM_16")
    window = make_window(wav=tone)
    lamp = window.conversation.mic_clip
    window.conversation.mic_gain.setValue(20)
    with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS):
        window.start_conversation()
    qtbot.waitUntil(lambda: lamp.lit, timeout=SESSION_MS)
    assert "click to clear" in lamp.toolTip()
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
        window.stop_conversation()
    qtbot.wait(200)
    assert lamp.lit  # still lit after the session: the user has not seen it yet
    qtbot.mouseClick(lamp, Qt.MouseButton.LeftButton)
    assert not lamp.lit

"""The app's Qt-free parts: meter ballistics, level envelopes, the feed, stages, axis ranges,
and the atomic exporter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.audio.rings import SILENCE_DBFS, peak_dbfs
from app.gui.export.writers import ExportError, ExportKind, export_session
from app.gui.live.plots import nice_ceiling, nice_range
from app.gui.meters.ballistics import Ballistics
from app.gui.worker.feed import Feed, PeriodView, stage_ms
from app.gui.worker.levels import EnvelopeLevel
from app.gui.worker.recorder import AudioRecorder


def test_ballistics_attack_at_once_hold_then_decay() -> None:
    b = Ballistics(hold_s=1.0, decay_db_s=10.0, release_db_s=30.0)
    assert b.update(-6.0, 0.0) == (-6.0, -6.0)  # instant attack
    bar, peak = b.update(-60.0, 0.5)
    assert bar == pytest.approx(-21.0) and peak == -6.0  # bar releases, peak holds
    bar, peak = b.update(-60.0, 1.5)
    assert peak == pytest.approx(-16.0)  # held 1 s, then 10 dB/s
    assert bar <= peak


def test_envelope_plays_block_peaks_against_the_clock() -> None:
    now = [100.0]
    env = EnvelopeLevel(rate=1000, block_s=0.1, max_lag_s=1.5, clock=lambda: now[0])
    samples = np.zeros(1000, dtype=np.float32)
    samples[250] = 0.5  # in the third 100 ms block
    env.feed(samples)
    assert env.level_db() == SILENCE_DBFS
    now[0] += 0.25
    assert env.level_db() == pytest.approx(peak_dbfs(np.array([0.5])))
    now[0] += 2.0  # past the chunk: silence
    assert env.level_db() == SILENCE_DBFS
    for _ in range(10):  # fed faster than real time: the backlog never exceeds max_lag_s
        env.feed(samples)
    assert len(env._blocks) <= 30


def test_feed_is_bounded_and_counts_what_it_drops() -> None:
    feed = Feed(maxlen=3)
    for i in range(5):
        feed.push(PeriodView(i, float(i), 1.0, 1000.0, False, "SRc", "listen", 0.0))
    assert [v.index for v in feed.drain()] == [2, 3, 4] and feed.dropped == 2
    assert feed.drain() == []


def test_stages_never_count_nested_spans_twice() -> None:
    spans = [
        {"name": "backbone", "dur_us": 2000.0, "depth": 0},
        {"name": "synthesis", "dur_us": 9000.0, "depth": 0},
        {"name": "flow", "dur_us": 6000.0, "depth": 1},
        {"name": "vocoder", "dur_us": 2500.0, "depth": 1},
    ]
    assert stage_ms(spans) == {"backbone": 2.0, "flow": 6.0, "vocoder": 2.5}
    assert stage_ms([{"name": "synthesis", "dur_us": 9000.0, "depth": 0}]) == {"synthesis": 9.0}


def test_nice_axis_ranges_move_rarely() -> None:
    assert [nice_ceiling(v) for v in (1100, 0.3, 7, 1)] == pytest.approx([1200, 0.3, 8, 1])
    low, high = nice_range(512.3, 553.9)
    assert low <= 512.3 and high >= 553.9 and low % 10 == 0


def test_export_refuses_with_the_fix_and_leaves_no_partial_files(tmp_path: Path) -> None:
    recorder = AudioRecorder(16000, 24000)
    loud = np.full(24000, 2.0, np.float32)  # over full scale: clipped, never wrapped around
    recorder.add(np.zeros(16000, np.float32), loud)
    with pytest.raises(ExportError, match="start a conversation"):
        export_session(tmp_path, "s", [ExportKind.CSV], trace=None, channels=None)
    with pytest.raises(ExportError, match="plain name"):
        export_session(tmp_path, "../s", [ExportKind.MIC], trace=None, channels=None)
    paths = export_session(
        tmp_path, "s", [ExportKind.MIC, ExportKind.ASSISTANT], trace=None,
        channels=recorder.snapshot(),
    )  # fmt: skip
    import soundfile as sf

    voice, rate = sf.read(paths[0] if "assistant" in paths[0].name else paths[1], dtype="int16")
    assert rate == 24000 and voice.max() == 32767
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s-assistant.wav", "s-mic.wav"]


def test_the_microphone_meter_shows_what_the_model_hears() -> None:
    from app.gui.worker.levels import HeardLevel

    class Device:
        def level_db(self) -> float:
            return -12.0

    gain, open_ = [6.0], [True]
    level = HeardLevel(Device(), lambda: gain[0], lambda: open_[0])
    assert level.level_db() == -6.0
    gain[0] = 20.0
    assert level.level_db() == 0.0  # capped at full scale (the clip lamp says the rest)
    open_[0] = False  # push-to-talk released: the model hears nothing, and the meter says so
    assert level.level_db() == SILENCE_DBFS


def test_the_window_and_its_dialogs_import_no_torch() -> None:
    """The GUI thread never imports torch (docs/architecture.md): the engine thread does, at
    Start."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "from app.gui.launch import create_application\n"
        "app = create_application([])\n"
        "from app.gui.window.main_window import MainWindow\n"
        "from app.gui.settings.models import ModelsDialog\n"
        "from app.gui.window.help import HelpDialog\n"
        "assert 'torch' not in sys.modules, 'the GUI imported torch'\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]

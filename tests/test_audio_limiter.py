"""The output never clips: volume, mute and the peak limiter; the microphone gain and its count."""

from __future__ import annotations

import numpy as np
import pytest

from app.audio.limiter import (
    RANDOM_WEIGHTS_TRIM_DB,
    MicStage,
    OutputStage,
    PeakLimiter,
    db_to_gain,
)

RATE = 24000


@pytest.mark.parametrize("volume_db", [0.0, 12.0, 40.0])
def test_no_input_gets_past_the_ceiling(volume_db: float) -> None:
    rng = np.random.default_rng(0)
    stage = OutputStage(RATE, volume_db=volume_db)
    ceiling = stage.limiter.ceiling
    inputs = [
        rng.uniform(-1, 1, RATE).astype(np.float32),  # full-scale noise
        np.full(RATE, 1.0, np.float32),  # DC at full scale
        rng.normal(0, 3, RATE).astype(np.float32),  # far over full scale
        np.sign(rng.normal(size=RATE)).astype(np.float32),  # square-ish at +-1
        np.array([0.0, np.nan, np.inf, -np.inf, 5.0], np.float32),  # a broken model
        (0.01 * np.sin(np.arange(RATE) / 5)).astype(np.float32),  # quiet after loud
    ]
    for period in inputs * 3:
        out = stage.process(period)
        assert out.dtype == np.float32 and out.shape == (period.size,)
        assert np.all(np.isfinite(out))
        assert np.abs(out).max(initial=0) <= ceiling < 1.0 - 0.1  # -1 dBFS: 0.891
    assert stage.limiter.limited_blocks > 0


def test_quiet_audio_passes_unchanged_and_the_gain_recovers() -> None:
    limiter = PeakLimiter(RATE)
    quiet = (0.3 * np.sin(np.arange(RATE) / 7)).astype(np.float32)
    assert np.array_equal(limiter.process(quiet), quiet)
    assert limiter.limited_blocks == 0
    limiter.process(np.full(RATE // 10, 4.0, np.float32))  # a loud burst
    assert limiter.gain < 0.3
    after = [limiter.process(quiet) for _ in range(3)]  # 3 s at 0.25 s release
    assert np.allclose(after[-1], quiet, atol=1e-4) and limiter.gain > 0.999


def test_volume_mute_and_the_random_weights_trim() -> None:
    tone = (0.5 * np.sin(np.arange(RATE) / 3)).astype(np.float32)
    stage = OutputStage(RATE, volume_db=-6.0)
    assert np.abs(stage.process(tone)).max() == pytest.approx(0.5 * db_to_gain(-6.0), rel=1e-3)
    stage.muted = True
    assert not stage.process(tone).any()
    noise = np.random.default_rng(1).uniform(-1, 1, RATE).astype(np.float32)
    quiet = OutputStage(RATE, trim_db=RANDOM_WEIGHTS_TRIM_DB).process(noise)
    peak_dbfs = 20 * np.log10(np.abs(quiet).max())
    assert -20.5 < peak_dbfs < -19.5  # random weights play at about -20 dBFS


def test_microphone_gain_counts_clipped_samples() -> None:
    mic = np.array([0.1, -0.2, 0.6, -0.9], np.float32)
    stage = MicStage(gain_db=6.0)
    out = stage.process(mic)
    assert out[0] == pytest.approx(0.1 * db_to_gain(6.0), rel=1e-5)
    assert np.abs(out).max() <= 1.0 and stage.clipped == 2
    stage.gain_db = -120.0
    assert np.abs(stage.process(mic)).max() < 1e-5 and stage.clipped == 2

"""Sources and sinks of whole periods: resampling, padding, looping, pacing, atomic WAV writes."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from app.periods import SilenceSource, WavSink, WavSource


def tone(rate: int, seconds: float, channels: int = 1) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    mono = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    return np.stack([mono] * channels, axis=1) if channels > 1 else mono


def test_wav_source_resamples_downmixes_and_pads(tmp_path: Path) -> None:
    path = tmp_path / "in.wav"
    soundfile.write(path, tone(44_100, 2.5, channels=2), 44_100)
    source = WavSource(path, 16_000)
    assert abs(source.duration_s - 2.5) < 1e-3 and source.periods(16_000) == 3
    periods = [source.read_period(16_000) for _ in range(3)]
    assert source.read_period(16_000) is None
    assert all(p is not None and p.shape == (16_000,) and p.dtype == np.float32 for p in periods)
    assert periods[2] is not None and not periods[2][8_100:].any()  # the tail is silence
    spectrum = np.abs(np.fft.rfft(periods[0]))  # type: ignore[arg-type]
    assert abs(int(np.argmax(spectrum)) - 440) <= 1  # 1 Hz bins over one second


def test_wav_source_loops_and_paces_to_the_clock(tmp_path: Path) -> None:
    path = tmp_path / "in.wav"
    soundfile.write(path, tone(16_000, 0.5), 16_000)
    looping = WavSource(path, 16_000, loop=True)
    assert all(looping.read_period(8_000) is not None for _ in range(5))
    paced = WavSource(path, 16_000, realtime=True, loop=True)
    start = time.monotonic()
    for _ in range(3):
        paced.read_period(1_600)  # 0.1 s each
    assert time.monotonic() - start >= 0.29


def test_bad_inputs_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--input"):
        WavSource(tmp_path / "missing.wav", 16_000)
    junk = tmp_path / "junk.wav"
    junk.write_text("not audio")
    with pytest.raises(ValueError, match="not a sound file"):
        WavSource(junk, 16_000)
    with pytest.raises(ValueError, match=r"must end in \.wav"):
        WavSink(tmp_path / "out.mp3", 24_000)
    with pytest.raises(ValueError, match="mkdir -p"):
        WavSink(tmp_path / "no" / "out.wav", 24_000)


def test_wav_sink_streams_a_valid_wav_after_every_period(tmp_path: Path) -> None:
    path = tmp_path / "out.wav"
    sink = WavSink(path, 24_000)
    sink.write(np.full(24_000, 0.25, np.float32))
    assert soundfile.info(path).frames == 24_000  # on disk and valid before close
    sink.write(np.full((1, 12_000), 2.0, np.float32))  # clipped to full scale on write
    assert sink.close() == path and sink.close() == path
    audio, rate = soundfile.read(path, dtype="float32")
    assert rate == 24_000 and audio.size == 36_000 and audio.max() <= 1.0
    assert abs(audio[0] - 0.25) < 1e-4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]
    with pytest.raises(RuntimeError, match="closed"):
        sink.write(np.zeros(10, np.float32))


def test_wav_sink_replaces_an_earlier_file_only_when_asked_and_only_on_success(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keep.wav"
    soundfile.write(path, np.full(100, 0.5, np.float32), 24_000, subtype="PCM_16")
    earlier = path.read_bytes()
    with pytest.raises(ValueError, match="--force"):
        WavSink(path, 24_000)
    failed = WavSink(path, 24_000, overwrite=True)
    failed.write(np.zeros(10, np.float32))
    assert path.read_bytes() == earlier  # the new one is private until it succeeds
    failed.abort()
    assert path.read_bytes() == earlier and sorted(tmp_path.iterdir()) == [path]
    done = WavSink(path, 24_000, overwrite=True)
    done.write(np.array([np.nan, 0.1], np.float32))
    done.close()
    assert soundfile.info(path).frames == 2 and done.nonfinite == 1


def test_wav_source_refuses_nan_before_any_period(tmp_path: Path) -> None:
    path = tmp_path / "nan.wav"
    audio = tone(16_000, 1.0)
    audio[8_000] = np.nan
    soundfile.write(path, audio, 16_000, subtype="FLOAT")
    with pytest.raises(ValueError, match=r"holds NaN or infinite samples \(first at 0\.500 s\)"):
        WavSource(path, 16_000)


def test_silence_source_counts_down() -> None:
    source = SilenceSource(periods=2)
    assert source.read_period(100) is not None and source.read_period(100) is not None
    assert source.read_period(100) is None
    endless = SilenceSource()
    assert not any(endless.read_period(10).any() for _ in range(3))  # type: ignore[union-attr]

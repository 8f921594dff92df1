"""Choosing devices by name and host API, and the errors that name the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.audio import (
    AudioError,
    DeviceInfo,
    DeviceSink,
    DeviceSource,
    cancel_playback_echo,
    match_device,
)
from app.audio.echo import INSTALL_HINT, _webrtc, echo_available
from app.periods import SilenceSource, WavSink

MIC = DeviceInfo("USB Headset Mic", "ALSA", 0, 1, 0, 48000.0)
HEADSET = DeviceInfo("USB Headset", "ALSA", 1, 1, 2, 48000.0)
SPEAKERS = DeviceInfo("Speakers (Realtek)", "PulseAudio", 2, 0, 2, 44100.0)
PIPEWIRE = DeviceInfo("pipewire", "ALSA", 3, 64, 64, 44100.0)
JACK = DeviceInfo("system", "JACK Audio Connection Kit", 4, 2, 2, 48000.0)
ALL = [MIC, HEADSET, SPEAKERS, PIPEWIRE, JACK]


def test_a_name_substring_chooses_case_insensitively_in_portaudio_order() -> None:
    assert match_device(ALL, "headset", "input") is MIC
    assert match_device(ALL, "headset", "output") is HEADSET  # the mic has no output
    assert match_device(ALL, "realtek", "output") is SPEAKERS


def test_an_exact_name_wins_over_earlier_substring_matches() -> None:
    assert match_device(ALL, "usb headset", "input") is HEADSET


def test_the_host_api_narrows_the_choice() -> None:
    assert match_device(ALL, None, "input", host_api="jack") is JACK
    assert match_device(ALL, "s", "output", host_api="pulse") is SPEAKERS
    with pytest.raises(AudioError, match="on host API 'JACK'"):
        match_device(ALL, "headset", "input", host_api="JACK")


def test_no_name_takes_the_default_or_the_first_usable() -> None:
    assert match_device(ALL, None, "output", default=3) is PIPEWIRE
    assert match_device(ALL, None, "output", default=0) is HEADSET  # 0 has no output


def test_no_match_names_every_available_device_and_the_flag() -> None:
    with pytest.raises(AudioError) as info:
        match_device(ALL, "bluetooth", "output")
    message = str(info.value)
    for name in ("USB Headset", "Speakers (Realtek)", "pipewire", "system"):
        assert f"'{name}'" in message
    assert "USB Headset Mic" not in message  # not an output device
    assert "--output-device" in message


def test_no_device_at_all_says_how_to_get_one() -> None:
    with pytest.raises(AudioError) as info:
        match_device([SPEAKERS], None, "input")
    message = str(info.value)
    assert "no audio input device found" in message
    assert "--input-device" in message and "scripts/virtual_audio.sh" in message
    with pytest.raises(AudioError, match="host APIs with output devices: PulseAudio"):
        match_device([SPEAKERS], None, "output", host_api="ALSA")


def test_importing_the_package_loads_no_portaudio() -> None:
    """Importable without a sound card or libportaudio2: PortAudio loads on first device use."""
    code = (
        "import sys, app.audio\n"
        "from app.audio import DeviceSource, DeviceSink\n"
        "DeviceSource(None); DeviceSink(None)\n"
        "sys.exit(1 if 'sounddevice' in sys.modules else 0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_echo_cancellation_absent_names_the_package() -> None:
    if echo_available():
        pytest.skip("pywebrtc-audio is installed here; the absent case cannot be shown")
    with pytest.raises(AudioError) as info:
        _webrtc()
    assert "pip install pywebrtc-audio" in str(info.value)
    assert "pip install pywebrtc-audio" in INSTALL_HINT


def test_echo_is_cancelled_only_between_two_devices(tmp_path: Path) -> None:
    # A file on either end has no acoustic path: nothing is opened, nothing raises.
    assert not cancel_playback_echo(DeviceSource(None), WavSink(tmp_path / "out.wav", 24000))
    assert not cancel_playback_echo(SilenceSource(), DeviceSink(None))


def test_constructor_arguments_are_checked_early() -> None:
    with pytest.raises(ValueError, match="block_s"):
        DeviceSource(None, block_s=0)
    with pytest.raises(ValueError, match="prebuffer_s"):
        DeviceSink(None, prebuffer_s=20.0)


def test_using_a_stream_before_start_says_so_and_after_close_ends_quietly() -> None:
    source, sink = DeviceSource(None), DeviceSink(None)
    with pytest.raises(AudioError, match=r"call start\(\) first"):
        source.read_period(160)
    with pytest.raises(AudioError, match=r"call start\(\) first"):
        sink.write(np.zeros(240, np.float32))
    source.close()
    sink.close()
    assert source.read_period(160) is None  # the PeriodSource way of saying: input ended
    sink.write(np.zeros(240, np.float32))
    assert sink.dropped == 240


class _Status:
    def __init__(self, underflow: bool) -> None:
        self.output_underflow = underflow


class _Time:  # PortAudio's ``time`` argument, from a host that gives no times
    outputBufferDacTime = 0.0


def test_the_start_up_period_counts_no_dropout() -> None:
    """The window showed a red '1 dropout' a second after Start: the stream primes and the first
    period comes late by nature. Underflows and dry spells count only after ``settle_s`` of
    device time from the first sample written; later ones count as before. (The callback is
    driven by hand: its status flags are what PortAudio would pass.)"""
    rate, block = 48000, 960
    sink = DeviceSink(None, rate=rate, settle_s=1.0)
    sink._prepare(rate, block)
    out = np.zeros((block, 1), dtype=np.float32)

    def blocks(n: int, underflow: bool = False) -> None:
        for _ in range(n):
            sink._callback(out, block, _Time(), _Status(underflow))

    blocks(100, underflow=True)  # nothing written yet: the start-up period has not begun
    sink._jitter.push(np.full(block * 10, 0.1, np.float32))  # a first period, then dry
    blocks(49, underflow=True)  # 0.98 s of device time from the first write
    assert sink.stats.underflows == 0 and sink.stats.dry_events == 0
    blocks(2)  # the start-up period is over
    sink._jitter.push(np.full(block * 10, 0.1, np.float32))
    blocks(20, underflow=True)  # plays, runs dry, underflows: counted now
    assert sink.stats.underflows == 20 and sink.stats.dry_events == 1


def test_a_sample_written_now_plays_after_everything_queued_before_it() -> None:
    """The window's response time runs to the first sample played, not the one queued: the
    sink says how far ahead a write plays (the RESPONSE chip read 0.3-1.5 s fast)."""
    rate, block = 48000, 960
    sink = DeviceSink(None, rate=rate, prebuffer_s=0.1)
    sink._prepare(rate, block)
    sink.stats.latency_s = 0.05  # what PortAudio reports once the stream is open
    assert sink.ahead_s == pytest.approx(0.1 + 0.05)  # idle: the prebuffer comes first
    sink._jitter.push(np.full(rate // 2, 0.1, np.float32))  # half a second queued
    sink.stats.rate = rate
    assert sink.ahead_s == pytest.approx(0.5 + 0.1 + 0.05)
    out = np.zeros((block, 1), dtype=np.float32)
    for _ in range(6):  # playback starts and plays 0.1 s of it
        sink._callback(out, block, _Time(), _Status(False))
    assert sink.playing
    assert sink.ahead_s == pytest.approx(0.5 - 6 * block / rate + 0.1 + 0.05, abs=0.11)


def test_a_source_says_how_long_ago_its_last_sample_was_captured() -> None:
    source = DeviceSource(None, rate=16000)
    source._prepare(48000, 960)
    source.stats.rate, source.stats.latency_s = 48000, 0.03
    source._pending.write(np.zeros(1600, np.float32))  # 0.1 s captured after the last read
    assert source.captured_ago_s == pytest.approx(0.1 + 0.03)

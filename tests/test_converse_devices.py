"""``converse --headless`` through real audio devices: 20 s in real time on the virtual card.

PipeWire's null sink (scripts/virtual_audio.sh) is both the speaker and, through its monitor,
the microphone. A second player in this process speaks espeak-ng utterances into the same sink
(the user), so the loop hears real speech through PortAudio, resampling and its rings; what the
assistant answers goes to the same sink. The run is paced by the devices: 20 periods in 20 s, no
device lost, the user's speech seen by the VAD, the over-budget periods counted honestly, and no
input lost while the loop's backlog fit the source's ring. How many periods a busy CPU takes
over budget is the benchmark's figure, not this test's.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soxr

from app.audio import DeviceSink
from app.cli import main
from engine.trace import read_trace
from tests.audio_env import AudioEnv, virtual_audio  # noqa: F401  (the fixture)
from tests.speech import conversation

# pytest-timeout as the last line only (every wait here is bounded); the thread method, as a
# PortAudio call blocked in C never sees the signal method's exception.
pytestmark = [
    pytest.mark.audio,
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.timeout(300, method="thread"),
]


def speak_until(stop: threading.Event, device: str) -> None:
    """The user: an utterance, 4 s of silence, again, until ``stop``."""
    talk = conversation(["hello there, how are you doing today", 4.0])
    audio = soxr.resample(talk.audio, 16_000, 24_000).astype(np.float32)
    user = DeviceSink(device, rate=24_000)
    user.start()
    try:
        while not stop.is_set():
            user.write(audio)
            stop.wait(audio.size / 24_000)
    finally:
        user.close()


def test_a_20_s_conversation_runs_on_devices(
    virtual_audio: AudioEnv,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stop = threading.Event()
    user = threading.Thread(target=speak_until, args=(stop, virtual_audio.output_device))
    user.start()
    trace = tmp_path / "devices.json"
    argv = ["converse", "--headless", "--family", "synthetic", "--device", "cpu", "--seconds", "20"]
    argv += ["--quiet"]
    argv += ["--input-device", virtual_audio.input_device]
    argv += ["--output-device", virtual_audio.output_device, "--trace", str(trace)]
    try:
        start = time.monotonic()
        status = main([*argv, "--record-audio", str(tmp_path / "channels")])
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        user.join(timeout=30)
    assert status == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert summary["periods"] == 20 and elapsed >= 19.0
    source, sink = summary["audio"]["source"], summary["audio"]["sink"]
    assert not source["lost"] and not sink["lost"], summary["audio"]
    assert source["timestamps"] and sink["timestamps"], summary["audio"]  # PipeWire gives times
    _, records = read_trace(trace.with_suffix(".jsonl"))
    assert len(records) == 20
    assert max(r["loop"]["voice_prob"] for r in records) > 0.5, "the VAD never heard the user"
    # Over budget exactly when a period took longer than its period (how often is the CPU's
    # speed: bench/, not a test). The input waits in the source's ring while the loop is
    # behind; none of it is lost unless the backlog outgrew the ring (10 s).
    assert all(r["over_budget"] == (r["processing_s"] > r["period_s"]) for r in records)
    assert summary["over_budget"] == sum(r["over_budget"] for r in records)
    backlog = most = 0.0
    for r in records:
        backlog = max(0.0, backlog + r["processing_s"] - r["period_s"])
        most = max(most, backlog)
    if most < 9.0:  # a second short of the ring: the reads kept it from filling
        assert source["overflows"] == 0, (summary["audio"], f"the most behind: {most:.1f} s")

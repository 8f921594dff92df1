"""Echo alignment by PortAudio's ADC and DAC times, with xruns, without a sound card.

The source's and the sink's real callbacks are driven by hand with the times PortAudio would
pass (``inputBufferAdcTime``, ``outputBufferDacTime``) on a simulated device (tests/hand_room.py:
a 48-kHz clock, 20-ms blocks, 120 ms from a callback to its DAC and 40 ms from the ADC to a
callback), and an echo that comes back 3 ms after the DAC played it. The engine writes the sink and
reads the source in 0.2-s periods as the basic voice does, through ``DeviceSink.write`` and the
source's drain and take (the canceller runs inside). Two xruns: the speaker starves for 60 ms
(the DAC plays silence the tap never saw: the blocks after it play later than their order
says) and the microphone loses 100 ms (the blocks after it are captured later). Lined up by
time, the echo stays gone through both, each counted once as a gap; by queue position (a host
that gives 0.0) the same run loses the echo at the first xrun.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.audio import DeviceSource, echo_available
from app.audio.marks import Marks, Timeline
from tests.hand_room import BLOCK, DEVICE_RATE, HandRoom, Status, Time, speech_like

NEEDS = "echo cancellation needs pywebrtc-audio: pip install pywebrtc-audio"

MIC_RATE, OUT_RATE = 16000, 24000  # the model's
PERIOD_S = 0.2


def room(ticks: int, *, timed: bool) -> tuple[list[float], DeviceSource]:
    """Residual rms of each microphone period, and the source (its canceller's counts). The
    speaker starves at ticks 40-42, the microphone at 75-79."""
    hand = HandRoom(MIC_RATE, OUT_RATE, ticks, echo=0.7, timed=timed,
                    speaker_xrun=(40, 3), mic_xrun=(75, 5))  # fmt: skip
    hand.source.enable_echo_cancel(hand.sink)
    speech = speech_like(np.random.default_rng(0), OUT_RATE * (ticks // 50 + 2), OUT_RATE)
    per_period, mic, levels = round(PERIOD_S * OUT_RATE), round(PERIOD_S * MIC_RATE), []
    for tick in range(ticks):
        if tick % 10 == 0:  # the engine's period: write the next 0.2 s, read what is there
            k = tick // 10
            hand.sink.write(speech[k * per_period : (k + 1) * per_period])
            period = hand.read(mic)
            if period is not None:
                levels.append(float(np.sqrt(np.mean(period**2))))
        hand.tick(tick)
    return levels, hand.source


@pytest.mark.skipif(not echo_available(), reason=NEEDS)
def test_lined_up_by_time_the_echo_stays_gone_through_both_xruns() -> None:
    levels, source = room(150, timed=True)
    canceller = source._echo
    assert canceller is not None
    print(f"\nresidual rms per period {[round(v, 4) for v in levels]}")
    # The echo is ~0.1 rms (0.7 x the speech's ~0.14). From the third period on it is > 26 dB
    # down in every period, those the xruns fall in (ticks 40-42 and 75-79: periods 4 and 7)
    # included; each xrun moved the sample counters once, and the canceller followed it.
    assert max(levels[2:]) < 0.1 * 0.05
    assert canceller.timed and canceller.gaps == 2 and canceller.realigned == 0


@pytest.mark.skipif(not echo_available(), reason=NEEDS)
def test_without_times_it_lines_up_by_queue_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A host that gives 0.0: the queues' estimate, as before, and one line in the log. The
    speaker's xrun then moves the echo against the far end (seen: back at full level in the
    periods after it) until AEC3 finds it again; the times above prevent that."""
    with caplog.at_level("WARNING", logger="duplexcadence.audio"):
        levels, source = room(150, timed=False)
    canceller = source._echo
    assert canceller is not None and not canceller.timed and canceller.gaps == 0
    said = [r.getMessage() for r in caplog.records if "queue position" in r.getMessage()]
    assert len(said) == 1 and "no ADC times" in said[0], said
    print(f"\nresidual rms per period {[round(v, 4) for v in levels]}")
    assert max(levels[2:4]) < 0.1 * 0.05  # before the first xrun it cancels too
    assert max(levels[4:8]) > 0.1 * 0.1  # after it, lined up by queue, the echo is back


def test_marks_carry_times_out_of_the_callback_and_drop_what_does_not_fit() -> None:
    marks = Marks(2)
    marks.put(0, 10.0, 960)
    marks.put(960, 10.02, 960)
    marks.put(1920, 10.04, 960)  # full: dropped, counted
    index, time, count = marks.take()
    assert count.tolist() == [960, 960]
    assert index.tolist() == [0, 960] and time.tolist() == [10.0, 10.02] and marks.lost == 1
    assert marks.take()[0].size == 0
    line = Timeline(np.array([0.0, 320.0]), np.array([10.0, 10.05]), 16000.0)
    assert line.at(160) == pytest.approx(10.01) and line.at(480) == pytest.approx(10.06)


def test_a_period_says_when_each_of_its_blocks_was_captured_across_an_xrun() -> None:
    """The response latency's start and the canceller's near end: an overflow that lost 60 ms
    between two blocks shows in the period's timeline at the block after it."""
    source = DeviceSource(None, rate=MIC_RATE)
    source._prepare(DEVICE_RATE, BLOCK)
    block = np.zeros((BLOCK, 1), np.float32)
    for k, adc in enumerate([5.0, 5.02, 5.1, 5.12]):  # 5.04-5.1: lost
        source._callback(block, BLOCK, Time(inputBufferAdcTime=adc), Status(input_overflow=k == 2))
    source._drain()
    source._take(MIC_RATE // 25)  # 40 ms: the first two blocks
    first = source.timeline
    source._take(MIC_RATE // 25)
    second = source.timeline
    assert first is not None and second is not None
    assert first.offsets.tolist() == [0.0, 320.0] and first.times.tolist() == [5.0, 5.02]
    assert second.times[0] == pytest.approx(5.1) and second.at(320) == pytest.approx(5.12)
    assert source.stats.timestamps and source.stats.overflows == 1

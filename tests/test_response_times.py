"""Response latency from the converters' times, through xruns, without a sound card.

The real source and sink callbacks run by hand (tests/hand_room.py) with PortAudio's times; the
engine side is the one the app runs (app.response.ResponseMeter, the source's period timeline,
DeviceSink.dac_time). The user speaks from 0.1 s to 0.7 s of ADC time; the microphone loses
100 ms inside the speech (counting samples would put its end 100 ms early) and the speaker
starves for 60 ms before the answer plays (counting samples would miss that it played 60 ms
later). The answer's first sound is written at 1.2 s. The measure must be the DAC time of
that sound minus the ADC time of the speech's end, to the clock's resolution (its 20-ms
blocks), and reported only once the sound has played.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from app.response import ResponseClock, ResponseMeter, response_facts
from tests.hand_room import DEVICE_RATE, T0, HandRoom

MIC_RATE, OUT_RATE = 16000, 22050  # the basic voice's
PERIOD_S = 0.2
ANSWER_TICK = 60  # the engine writes the answer at 1.2 s
ONSET = 5 * 441  # its first loud 20-ms block (the clock's blocks at 22.05 kHz)


def user_voice() -> np.ndarray:
    rng = np.random.default_rng(1)
    voice = np.zeros(DEVICE_RATE, np.float32)
    voice[DEVICE_RATE // 10 : 7 * DEVICE_RATE // 10] = 0.3 * np.sign(rng.standard_normal(28800))
    return voice


def converse(*, interrupt: bool = False) -> tuple[HandRoom, ResponseMeter, list[tuple[int, float]]]:
    hand = HandRoom(MIC_RATE, OUT_RATE, 150, speaker_xrun=(45, 3), mic_xrun=(20, 5))
    hand.user = user_voice()
    meter = ResponseMeter(hand.source, hand.sink, MIC_RATE, OUT_RATE)
    per_period, mic = round(PERIOD_S * OUT_RATE), round(PERIOD_S * MIC_RATE)
    answer = np.zeros(per_period, np.float32)
    answer[ONSET:] = 0.2
    measured = []
    for tick in range(150):
        if tick % 10 == 0:  # the engine's period: read, measure, step, write
            period = hand.read(mic)
            if period is not None:
                meter.heard(period)
                latency = meter.poll()
                if latency is not None:
                    measured.append((tick, latency))
            pcm = answer if tick == ANSWER_TICK else np.zeros(per_period, np.float32)
            meter.played(pcm)
            hand.sink.write(pcm)
            if interrupt and tick == ANSWER_TICK:
                hand.sink.interrupt()  # the user barged in: it never plays
        hand.tick(tick)
    return hand, meter, measured


def test_the_response_runs_from_the_speech_end_at_the_adc_to_the_first_sound_at_the_dac() -> None:
    hand, meter, measured = converse()
    assert meter.by == "timestamps"
    first_sound = int(np.flatnonzero(hand.dac > 0.1)[0])  # in the world: the DAC's own sample
    truth = (first_sound / DEVICE_RATE + T0) - (T0 + 0.7)
    print(f"\nmeasured {measured}, truth {truth:.4f} s")
    assert len(measured) == 1
    tick, latency = measured[0]
    # To the clock's 20-ms blocks (seen: 0.86 s against 0.88: the resampler's ringing after the
    # speech's cut is still loud in the block after it).
    assert latency == pytest.approx(truth, abs=0.021)
    played_at_tick = first_sound // 960 - 6  # the callback that played it
    assert tick > played_at_tick  # known once played, not when written
    facts = response_facts(latency, meter.by)
    assert facts == {"response_ms": round(latency * 1e3, 1), "response_by": "timestamps"}


def test_an_answer_flushed_before_it_played_is_no_response() -> None:
    _, _, measured = converse(interrupt=True)
    assert measured == []


def test_without_times_it_falls_back_to_the_queues_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hand = HandRoom(MIC_RATE, OUT_RATE, 20, timed=False)
    meter = ResponseMeter(hand.source, hand.sink, MIC_RATE, OUT_RATE)
    with caplog.at_level("WARNING", logger="duplexcadence.audio"):
        for tick in range(20):
            hand.tick(tick)
        period = hand.read(round(PERIOD_S * MIC_RATE))
        assert period is not None
        meter.heard(period)
    assert meter.by == "queues"
    said = [r.getMessage() for r in caplog.records if "response latency" in r.getMessage()]
    assert len(said) == 1 and "estimated from the queues" in said[0]


def test_the_assistants_own_echo_is_no_speech_and_starts_no_second_response() -> None:
    """Echo cancellation leaves a residue above the clock's -45 dB: heard while the assistant's
    sound plays (or within its 0.5-s tail), it is the assistant's, so the next clause of the
    same answer is no second response (seen on the speakers run: a 1.2-s 'response' inside an
    answer). The user's speech after the tail arms the clock again."""
    clock = ResponseClock(mic_rate=1000, out_rate=1000)

    def at(start: float) -> Callable[[float], float]:
        return lambda k: start + k / 1000

    def period(loud_from: float, loud_to: float) -> np.ndarray:
        x = np.zeros(1000, np.float32)
        x[round(loud_from * 1000) : round(loud_to * 1000)] = 0.3
        return x

    clock.heard(period(0.0, 0.6), at(0.0))  # the user, 0.0-0.6
    clock.played(period(0.2, 1.0), at(1.0))  # the answer from 1.2 on
    assert clock.poll() == pytest.approx(0.6)
    clock.heard(period(0.2, 1.0), at(1.0))  # its echo, 1.2-2.0
    clock.played(period(0.3, 0.8), at(2.0))  # its second clause, 2.3-2.8
    clock.heard(period(0.0, 0.9), at(2.0))  # its echo, and the tail to 3.3
    assert clock.poll() is None and clock.own > 0
    clock.heard(period(0.5, 0.8), at(3.0))  # the user again, 3.5-3.8
    clock.played(period(0.5, 1.0), at(4.0))
    assert clock.poll() == pytest.approx(0.7)

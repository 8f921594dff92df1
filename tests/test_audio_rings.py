"""Rings, the playback jitter buffer and streaming resampling: no device needed."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from app.audio import SILENCE_DBFS, JitterBuffer, Ring, peak_dbfs

RATE = 48000
BLOCK = 960  # 20 ms device blocks


def sine(n: int, freq: float = 440.0, amp: float = 0.8, phase: float = 0.0) -> np.ndarray:
    t = np.arange(n) / RATE
    return (amp * np.sin(2 * np.pi * freq * t + phase)).astype(np.float32)


def max_sine_step(freq: float = 440.0, amp: float = 0.8) -> float:
    """The largest sample-to-sample step of the sine itself: what a smooth output may have."""
    return 2 * np.pi * freq / RATE * amp


def play(buf: JitterBuffer, blocks: int) -> np.ndarray:
    out = np.empty(blocks * BLOCK, dtype=np.float32)
    for k in range(blocks):
        buf.pull(out[k * BLOCK : (k + 1) * BLOCK])
    return out


# -- Ring -------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=60))
def test_ring_keeps_order_and_counts_like_a_fifo(ops: list[tuple[bool, int]]) -> None:
    ring, model, next_value = Ring(37), deque[float](), 0
    for is_write, n in ops:
        if is_write:
            data = np.arange(next_value, next_value + n, dtype=np.float32)
            taken = ring.write(data)
            assert taken == min(n, 37 - len(model))
            model.extend(data[:taken].tolist())
            next_value += n
        else:
            out = np.full(n, -1.0, dtype=np.float32)
            got = ring.read_into(out)
            expect = [model.popleft() for _ in range(min(n, len(model)))]
            assert got == len(expect)
            assert out[:got].tolist() == expect
            assert (out[got:] == -1.0).all()  # untouched beyond what was given
        assert ring.available == len(model)
        assert ring.free == 37 - len(model)


def test_ring_between_threads_loses_and_reorders_nothing() -> None:
    ring, total, block = Ring(4096), 400_000, 480
    received: list[np.ndarray] = []

    def produce() -> None:
        value = 0
        while value < total:
            n = min(block, total - value)
            data = np.arange(value, value + n, dtype=np.float32)
            value += ring.write(data)  # retry what did not fit, as a writer that waits would

    producer = threading.Thread(target=produce)
    producer.start()
    got = 0
    while got < total:
        chunk = ring.read(1000)
        got += len(chunk)
        received.append(chunk)
    producer.join()
    assert np.array_equal(np.concatenate(received), np.arange(total, dtype=np.float32))


def test_peak_dbfs() -> None:
    assert peak_dbfs(np.array([0.5, -1.0], np.float32)) == 0.0
    assert abs(peak_dbfs(np.array([0.1], np.float32)) + 20.0) < 1e-4
    assert peak_dbfs(np.zeros(10, np.float32)) == SILENCE_DBFS
    assert peak_dbfs(np.zeros(0, np.float32)) == SILENCE_DBFS


# -- JitterBuffer -----------------------------------------------------------------------------
def test_jitter_waits_the_prebuffer_then_plays_exactly_what_was_written() -> None:
    buf = JitterBuffer(capacity=RATE * 4, prebuffer=5 * BLOCK, fade=240)
    assert (play(buf, 3) == 0).all() and not buf.playing  # nothing queued: idle, not dry
    tone = sine(RATE)  # a whole 1-s period arrives at once: it still waits the prebuffer
    buf.push(tone)
    out = play(buf, 5 + 50)
    assert (out[: 5 * BLOCK] == 0).all()
    played = out[5 * BLOCK :]
    fade = buf.fade
    assert np.array_equal(played[fade:], tone[fade : len(played)])  # bit-exact after fade-in
    ramp = np.arange(1, fade + 1, dtype=np.float32) / fade
    assert np.allclose(played[:fade], tone[:fade] * ramp, atol=1e-7)
    assert buf.dry_events == 0


def test_jitter_running_dry_fades_out_instead_of_clicking() -> None:
    buf = JitterBuffer(capacity=RATE * 4, prebuffer=0, fade=240)
    n = 10 * BLOCK + 300
    # Cut at the sine's crest, mid-block: a hard stop would step by the full amplitude.
    tone = sine(n, phase=np.pi / 2 - 2 * np.pi * 440 * (n - 1) / RATE)
    assert abs(tone[-1] - 0.8) < 1e-3
    buf.push(tone)
    out = play(buf, 14)
    assert buf.dry_events == 1 and not buf.playing
    steps = np.abs(np.diff(np.concatenate([[0.0], out])))
    assert steps.max() <= max_sine_step() * 1.05, steps.max()
    assert (out[n + buf.fade :] == 0).all()  # silence after the decay
    assert np.array_equal(out[buf.fade : n], tone[buf.fade :])  # nothing dropped before it


def test_jitter_resumes_with_a_fade_in_and_counts_each_dry_spell() -> None:
    buf = JitterBuffer(capacity=RATE * 4, prebuffer=2 * BLOCK, fade=240)
    pieces = []
    for _ in range(3):  # play, run dry, the engine is late, play again (mid-crest each time)
        buf.push(sine(5 * BLOCK + 123, phase=np.pi / 2))
        pieces.append(play(buf, 10))
    out = np.concatenate(pieces)
    assert buf.dry_events == 3
    steps = np.abs(np.diff(np.concatenate([[0.0], out])))
    assert steps.max() <= max_sine_step() * 1.05, steps.max()


def test_jitter_flush_drops_the_queue_with_a_fade() -> None:
    buf = JitterBuffer(capacity=RATE * 4, prebuffer=0, fade=240)
    buf.push(sine(RATE))
    first = play(buf, 5)
    buf.request_flush()  # barge-in
    rest = play(buf, 5)
    assert buf.ring.available == 0 and not buf.playing
    assert buf.dry_events == 0  # an interruption is not an underrun
    steps = np.abs(np.diff(np.concatenate([first, rest])))
    assert steps.max() <= max_sine_step() * 1.05
    assert (rest[buf.fade :] == 0).all()


def test_jitter_overflow_returns_what_did_not_fit() -> None:
    buf = JitterBuffer(capacity=1000, prebuffer=0, fade=10)
    assert buf.push(np.ones(800, np.float32)) == 0
    assert buf.push(np.ones(800, np.float32)) == 600


# -- soxr --------------------------------------------------------------------------------------
def test_soxr_stream_matches_one_shot_and_per_chunk_does_not() -> None:
    """Why the source and sink keep one ResampleStream: chunk edges must not show."""
    rate_in, rate_out, chunk = 44100, 16000, 882  # a 20-ms device block at 44.1 kHz
    t = np.arange(3 * rate_in) / rate_in
    signal = (0.5 * np.sin(2 * np.pi * 997 * t) + 0.2 * np.sin(2 * np.pi * 3001 * t)).astype(
        np.float32
    )
    whole = soxr.resample(signal, rate_in, rate_out)
    stream = soxr.ResampleStream(rate_in, rate_out, 1, "float32")
    pieces = [stream.resample_chunk(signal[i : i + chunk]) for i in range(0, len(signal), chunk)]
    pieces.append(stream.resample_chunk(np.zeros(0, np.float32), last=True))
    streamed = np.concatenate(pieces)
    assert len(streamed) == len(whole)
    assert np.max(np.abs(streamed - whole)) < 1e-4
    stateless = np.concatenate(
        [
            soxr.resample(signal[i : i + chunk], rate_in, rate_out)
            for i in range(0, len(signal), chunk)
        ]
    )
    middle = slice(1000, len(whole) - 1000)
    n = min(len(stateless), len(whole))
    assert np.max(np.abs(stateless[:n][middle] - whole[:n][middle])) > 100 * 1e-4


def test_soxr_stream_24k_to_44k1_keeps_the_count_over_many_periods() -> None:
    """The sink converts whole 1-s periods: over 30 periods no sample may be gained or lost."""
    stream = soxr.ResampleStream(24000, 44100, 1, "float32")
    out = sum(len(stream.resample_chunk(np.zeros(24000, np.float32))) for _ in range(30))
    out += len(stream.resample_chunk(np.zeros(0, np.float32), last=True))
    assert out == 30 * 44100

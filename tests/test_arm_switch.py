"""Switching arm between two calls keeps a stream exact (issue: engine/arms.py).

A toy chunk stream (two solver-like steps, each with its own retained cache) runs a long stream
with turn resets while its arm changes at random between calls; every output and every retained
cache must equal a pure eager run's with ``torch.equal``. On CPU the replay engine makes and
counts every admission decision without launching graphs; the ``gpu`` variant replays for real.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from engine.arms import ARMS, Arm
from engine.replay import ReplayEngine
from tests.gpu_results import record
from tests.toy import ToyAttention, ToyConfig, inputs, stream_plan
from tests.toy_arms import ToyChunkStream


def run_switching(device: str, calls: int, seed: int) -> tuple[int, int, dict[str, int], Any]:
    """(calls, exact calls, arms seen, replay totals) of a stream whose arm changes at random."""
    cfg = ToyConfig(seed=seed)
    toy = ToyAttention(cfg, device)
    engine = ReplayEngine(device)
    reference = ToyChunkStream(toy, ReplayEngine(device, enabled=False), Arm.EAGER)
    stream = ToyChunkStream(toy, engine, Arm.SRC)
    plan = stream_plan(cfg, calls, seed)
    rng, seen, exact = random.Random(seed), dict.fromkeys(map(str, ARMS), 0), 0
    xs = inputs(cfg, plan, seed, device)
    with torch.no_grad():
        for n in plan:
            if n is None:
                reference.reset()
                stream.reset()
                continue
            if rng.random() < 0.3:
                stream.set_arm(rng.choice(ARMS))
            seen[str(stream.arm)] += 1
            x = next(xs)
            same = torch.equal(reference.chunk(x), stream.chunk(x))
            exact += same and all(
                torch.equal(a, b)
                for a, b in zip(reference.caches, stream_state(stream), strict=True)
            )
    return sum(n is not None for n in plan), exact, seen, engine.snapshot()["total"]


def stream_state(stream: ToyChunkStream) -> list[torch.Tensor]:
    """The retained caches in whichever representation the current arm keeps."""
    if stream.arm.state_rule:
        return [carry.view() for carry in stream.carries]
    return stream.caches


pytestmark = pytest.mark.usefixtures("one_thread")


def test_switching_arms_between_calls_stays_exact_on_cpu() -> None:
    calls, exact, seen, replay = run_switching("cpu", calls=240, seed=3)
    assert exact == calls, f"{calls - exact} of {calls} calls differ from eager"
    assert all(count > 0 for count in seen.values()), f"every arm must run: {seen}"
    assert replay["hits"] > 0 and replay["invalidations"] == 0, replay


def test_set_arm_moves_state_by_value() -> None:
    toy = ToyAttention(ToyConfig(seed=1), "cpu")
    stream = ToyChunkStream(toy, ReplayEngine("cpu"), Arm.EAGER)
    with torch.no_grad():
        for x in inputs(toy.cfg, [toy.cfg.chunk] * 3, seed=5, device="cpu"):
            stream.chunk(x)
    before = [c.clone() for c in stream.caches]
    stream.set_arm(Arm.S)
    assert all(torch.equal(a, c.view()) for a, c in zip(before, stream.carries, strict=True))
    stream.set_arm(Arm.R)
    assert all(torch.equal(a, b) for a, b in zip(before, stream.caches, strict=True))


@pytest.mark.gpu
def test_switching_arms_between_calls_stays_exact_on_gpu() -> None:
    calls, exact, seen, replay = run_switching("cuda", calls=400, seed=7)
    assert exact == calls, f"{calls - exact} of {calls} calls differ from eager"
    assert all(count > 0 for count in seen.values()), f"every arm must run: {seen}"
    assert replay["hits"] > 0 and replay["invalidations"] == 0, replay
    record("arm_switching", calls=calls, exact=exact, **replay)

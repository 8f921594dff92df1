"""Moshi on the CPU: our frame equals the vendor's loop, and every arm equals eager, bit for bit.

Small config, seeded random weights, seeded noise in, sampling on. On the CPU the sampling
operators draw from the host generator, so the engine keeps them eager (counted
``host_randomness``); Mimi's encode and decode replay (simulated) under R and SR.
"""

from __future__ import annotations

import pytest
import torch

from engine.arms import Arm
from tests.moshi_small import first_difference, make_stream, models, noise, run, vendor_run

pytestmark = pytest.mark.usefixtures("one_thread")

FRAMES = 40
RESET_AT = (23,)


def test_our_eager_equals_the_vendors_loop() -> None:
    frames = noise(FRAMES, seed=11)
    reference = vendor_run(models(seed=3), frames, seed=5, reset_at=RESET_AT)
    stream, _ = make_stream(Arm.EAGER, seed=3)
    ours = run(stream, frames, seed=5, reset_at=RESET_AT)
    for i, ((tokens, pcm), out) in enumerate(zip(reference, ours, strict=True)):
        if tokens is None:
            assert out.pcm is None and (out.tokens == -2).all(), f"frame {i}"
            continue
        assert torch.equal(tokens, out.tokens), f"frame {i}"
        assert out.pcm is not None and torch.equal(pcm, out.pcm), f"frame {i}"
    speech = torch.cat([o.pcm for o in ours if o.pcm is not None])
    assert speech.abs().max() > 0 and len({o.tokens[0, 0, 0].item() for o in ours}) > 5


def test_eager_is_reproducible_run_to_run() -> None:
    frames = noise(FRAMES, seed=12)
    first = run(make_stream(Arm.EAGER, seed=4)[0], frames, seed=6, reset_at=RESET_AT)
    second = run(make_stream(Arm.EAGER, seed=4)[0], frames, seed=6, reset_at=RESET_AT)
    assert first_difference(first, second) is None


@pytest.mark.parametrize("arm", [Arm.S, Arm.R, Arm.RC, Arm.SR, Arm.SRC])
def test_every_arm_equals_eager_across_a_reset_and_a_live_switch(arm: Arm) -> None:
    frames = noise(FRAMES, seed=13)
    eager = run(make_stream(Arm.EAGER, seed=5)[0], frames, seed=7, reset_at=RESET_AT)
    other = Arm.SRC if arm != Arm.SRC else Arm.R
    stream, replay = make_stream(arm, seed=5)
    ours = run(stream, frames, seed=7, reset_at=RESET_AT, switch={15: other, 31: arm})
    assert first_difference(eager, ours) is None
    ops = replay.snapshot()["ops"]
    misses = {name: op["misses"] for name, op in ops.items()}
    assert not any(
        reason in m for m in misses.values() for reason in ("not_in_catalog", "drift", "unkeyable")
    ), misses
    assert sum(op["invalidations"] for op in ops.values()) == 0
    if arm.replay:  # on the CPU the samplers stay eager, counted; Mimi replays (simulated)
        sampled = [n for n, m in misses.items() if "host_randomness" in m]
        assert sampled and all("lm_step" in n or "depformer" in n or "frame" in n for n in sampled)
    if arm in (Arm.R, Arm.SR):
        mimi = [op["hits"] for name, op in ops.items() if "mimi" in name and op["hits"]]
        assert len(mimi) == 2 and min(mimi) > FRAMES // 3


def test_reset_is_in_place() -> None:
    stream, _ = make_stream(Arm.SRC, seed=6)
    run(stream, noise(5, seed=14))
    before = [(t.data_ptr(), tuple(t.shape)) for t in stream.written()]
    stream.reset()
    run(stream, noise(3, seed=15))
    assert [(t.data_ptr(), tuple(t.shape)) for t in stream.written()] == before
    assert stream.frames == 3


def test_runs_in_separate_processes_agree() -> None:
    """The harness of the GPU reproducibility test (3 processes x 500 frames on the 7B), small."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "tests.moshi_small", "--frames", "12", "--seed", "4"]
    runs = [
        subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
        for _ in range(2)
    ]
    assert len({json.loads(run.stdout)["digest"] for run in runs}) == 1

"""Moshi on CUDA at the released 7B config (seeded random bf16 weights, seeded noise in, sampling
on): the temporal step's pinned attention kernel is reproducible across processes, our eager
equals the vendor's loop, and every arm equals eager bit for bit over >= 500 frames, three seeds,
across a reset and a live arm switch, with real graphs (replays counted).

One 7B takes ~16 GB; eager runs ~0.13 s per frame, so one seed of the arms test takes about
three minutes. ``DUPLEXCADENCE_MOSHI_FRAMES`` (default 500) and ``-k "seed0"`` etc. split the
work over device commands. Run with ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (``bench/run_gpu.sh``
sets it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from adapters.moshi.stream import MoshiStream
from engine.arms import Arm
from tests.gpu_results import record
from tests.moshi_small import (
    DECLARATION,
    digests_across_processes,
    every_arm_exact,
    make_stream,
    models,
    noise,
    run,
    vendor_run,
)

pytestmark = pytest.mark.gpu

FRAMES = int(os.environ.get("DUPLEXCADENCE_MOSHI_FRAMES", "500"))
SDPA = DECLARATION.operators["lm_step"].kernels["sdpa"]


@pytest.fixture(scope="module")
def stream() -> Iterator[MoshiStream]:
    s, _ = make_stream(Arm.EAGER, seed=0, size="full", device="cuda", sdpa=SDPA)
    yield s
    del s
    torch.cuda.empty_cache()


def test_the_pinned_temporal_kernel_is_reproducible_across_processes() -> None:
    """3 processes x FRAMES frames of SRc (equal to eager: the arms test), the same digest."""
    digests = digests_across_processes("tests.moshi_small", FRAMES)
    record("moshi_reproducible_processes", processes=3, frames=FRAMES, sdpa=SDPA,
           distinct_digests=len(digests))  # fmt: skip
    assert len(digests) == 1


def test_our_eager_equals_the_vendors_loop_on_the_7b() -> None:
    frames = noise(FRAMES, seed=7, device="cuda")
    reset_at = (FRAMES // 2,)
    reference = vendor_run(models(0, "full", "cuda"), frames, seed=1, reset_at=reset_at, sdpa=SDPA)
    torch.cuda.empty_cache()
    ours_stream, _ = make_stream(Arm.EAGER, seed=0, size="full", device="cuda", sdpa=SDPA)
    ours = run(ours_stream, frames, seed=1, reset_at=reset_at)
    equal = 0
    for (tokens, pcm), out in zip(reference, ours, strict=True):
        if tokens is None:
            equal += out.pcm is None
        elif torch.equal(tokens, out.tokens) and out.pcm is not None and torch.equal(pcm, out.pcm):
            equal += 1
    record("moshi_eager_vs_vendor", frames=FRAMES, equal_frames=equal, sdpa=SDPA)
    assert equal == FRAMES


@pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed0", "seed1", "seed2"])
def test_every_arm_equals_eager_on_the_7b(
    stream: MoshiStream, seed: int, replays: list[int]
) -> None:
    frames = noise(FRAMES, seed=100 + seed, device="cuda")
    exact = every_arm_exact(stream, frames, seed, replays)
    record("moshi_arms_exact", seed=seed, frames=FRAMES, sdpa=SDPA, exact=exact)

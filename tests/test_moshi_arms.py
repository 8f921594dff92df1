"""Moshi on the CPU: our frame equals the vendor's loop, and every arm equals eager, bit for bit.

Small config, seeded random weights, seeded noise in, sampling on. On the CPU the sampling
operators draw from the host generator, so the engine keeps them eager (counted
``host_randomness``); Mimi's encode and decode replay (simulated) under R and SR. Every call the
engine decides is counted: the counts must be exactly those the schedule of arms implies.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from engine.arms import Arm, Granularity
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
    arms = [arm if i < 15 or i >= 31 else other for i in range(FRAMES)]
    calls = expected_calls(arms, opens={0, *RESET_AT})
    for name, op in replay.snapshot()["ops"].items():
        short = name.removeprefix("moshi.")
        n, misses = calls[short], op["misses"]
        assert op["invalidations"] == 0, (name, op)
        if short.startswith("mimi"):  # replayed (simulated): captured once, on its second call
            assert op["hits"] + sum(misses.values()) + op["captures"] == n, (name, op)
            assert set(misses) <= {"warmup"} and op["captures"] == (n > 1), (name, op)
            assert op["rejections"] == 0, (name, op)
        else:  # a sampler: eager on the CPU, every call counted host_randomness
            assert op["hits"] == 0 and misses == ({"host_randomness": n} if n else {}), (name, op)
            # Rejected once per signature: a frame has two (open, steady), both run here.
            signatures = 0 if not n else 2 if short.startswith("frame") else 1
            assert op["rejections"] == signatures, (name, op)


def expected_calls(arms: list[Arm], opens: set[int]) -> Counter[str]:
    """The replayed operators each frame calls under its arm (frame ``i`` under ``arms[i]``;
    the frames in ``opens`` follow a reset, so they decode nothing)."""
    calls: Counter[str] = Counter()
    for i, arm in enumerate(arms):
        suffix = "_regions" if arm.state_rule else ""
        if arm.granularity is Granularity.CHUNK:
            calls[f"frame{suffix}"] += 1
        elif arm.granularity is Granularity.STEP:
            decode = ["mimi_decode"] if i not in opens else []
            for op in ["mimi_encode", "lm_step", "depformer_step", *decode]:
                calls[f"{op}{suffix}"] += 1
    return calls


def test_reset_is_in_place() -> None:
    stream, _ = make_stream(Arm.SRC, seed=6)
    run(stream, noise(5, seed=14))
    before = [(t.data_ptr(), tuple(t.shape)) for t in stream.written()]
    stream.reset()
    run(stream, noise(3, seed=15))
    assert [(t.data_ptr(), tuple(t.shape)) for t in stream.written()] == before
    assert stream.frames == 3


def test_a_rebound_state_tensor_is_gathered_again() -> None:
    """``written`` hands back its last gathering until a state binds another tensor: one of the
    same geometry is copied in place (the same tuple), any other one is gathered again, so the
    replay's address check sees it move."""
    stream, _ = make_stream(Arm.EAGER, seed=6)
    run(stream, noise(2, seed=14))
    before = stream.written()
    assert stream.written() is before and len({id(t) for t in before}) == len(before)
    state = stream.ops.lm.transformer._streaming_state
    offsets = state.offsets
    state.offsets = offsets + 0  # the vendor's way: a new tensor of the same geometry
    assert state.offsets is offsets and stream.written() is before
    state.offsets = torch.zeros((2,), dtype=offsets.dtype)
    after = stream.written()
    assert any(t is state.offsets for t in after) and not any(t is offsets for t in after)


def test_a_new_conversation_resets_in_place_and_keeps_the_graphs() -> None:
    """The loaded model (warmed, sealed) under SR: after ``reset`` every streaming state and
    region is at the same address, no graph is captured or dropped (Mimi keeps replaying), and
    the conversation starts over: the same input and seed give the same tokens and speech."""
    from adapters.face import ModelRequest
    from adapters.moshi.family import MOSHI

    seed = 4
    request = ModelRequest(device="cpu", model_size="small", arm=Arm.SR, seed=seed)
    loaded = MOSHI.load(request, lambda stage, fraction: None)
    model, replay = loaded.model, loaded.replay
    assert replay is not None
    mics = [f.flatten().numpy() for f in noise(6, seed=16)]

    def converse() -> list[tuple[list[int], list[torch.Tensor]]]:
        return [(s.facts["tokens"], s.audio) for s in map(model.step, mics)]

    first = converse()  # the family re-seeded the generator after its warm-up
    addresses = [(t.data_ptr(), tuple(t.shape)) for t in model.stream.written()]
    classes = {name: op["classes"] for name, op in replay.snapshot()["ops"].items()}
    model.reset()
    torch.manual_seed(seed)
    again = converse()
    assert [(t.data_ptr(), tuple(t.shape)) for t in model.stream.written()] == addresses
    snapshot = replay.snapshot()
    assert {name: op["classes"] for name, op in snapshot["ops"].items()} == classes
    total = snapshot["total"]
    assert total["captures"] == 0 and total["invalidations"] == 0 and total["hits"] > 0
    assert set(total["misses"]) == {"host_randomness"}  # the samplers, eager on the CPU
    for (tokens, audio), (tokens2, audio2) in zip(first, again, strict=True):
        assert tokens == tokens2
        assert all(torch.equal(a, b) for a, b in zip(audio, audio2, strict=True))


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


def test_streams_over_their_declared_tails_positions_or_frame_are_refused() -> None:
    """Mimi's convolution tails, the streams' positions and flags and the frame's own tensors
    are declared regions (``mimi_conv``, ``positions``, ``frame_*``): the small streams hold
    exactly the small point's counts, and streams holding more than the declaration's bound, or
    a wider frame, are refused at open with the fix."""
    from adapters.face import FamilyError
    from adapters.moshi.config import size_for
    from adapters.moshi.periods import check_regions
    from tests.moshi_small import DECLARATION

    stream, _ = make_stream(Arm.EAGER)
    values = size_for("small", DECLARATION).point
    assert stream.conv_values() == values["mimi_conv_values"]
    assert stream.held_bytes()["positions"] == values["position_bytes"]
    check_regions(stream, DECLARATION, values)
    with pytest.raises(FamilyError, match=r"over moshi\.yaml's bound mimi_conv_values=3,029"):
        check_regions(stream, DECLARATION, values | {"mimi_conv_values": 3029})
    with pytest.raises(FamilyError, match=r"872 bytes .* over moshi\.yaml's bound position_bytes"):
        check_regions(stream, DECLARATION, values | {"position_bytes": 871})
    with pytest.raises(
        FamilyError, match=r"frame_audio holds 3,840 values a frame, over moshi\.yaml's 3,838"
    ):
        check_regions(stream, DECLARATION, values | {"samples_per_frame": 1919})


def test_each_ring_region_is_one_allocation_of_its_declared_shape() -> None:
    """Every ring of a region is a slice of one tensor of the region's declared shape (one
    allocation a region: no allocator rounding a ring); a model larger than the declared region
    is refused with the fix, and one smaller (a checkpoint's codec may be) keeps exactly its
    rings' values, still in one tensor."""
    from moshi.models.lm import LMGen

    from adapters.face import FamilyError
    from adapters.moshi.config import size_for
    from adapters.moshi.regions import ring_shapes
    from adapters.moshi.stream import MoshiStream
    from engine.replay import ReplayEngine
    from tests.moshi_small import DECLARATION, SPF

    def caches(stream: MoshiStream) -> dict[str, list[torch.Tensor]]:
        return {region: [r.cache for r in rings] for region, rings in stream.rings().items()}

    def make(rings: dict[str, tuple[int, ...]]) -> MoshiStream:
        m = models()
        return MoshiStream(m.mimi, LMGen(m.lm), replay=ReplayEngine("cpu"), arm=Arm.EAGER,
                           samples_per_frame=SPF, sdpa="default", rings=rings)  # fmt: skip

    shapes = ring_shapes(DECLARATION, size_for("small", DECLARATION).point)
    for region, cs in caches(make(shapes)).items():
        (storage,) = {(c.untyped_storage().data_ptr(), c.untyped_storage().nbytes()) for c in cs}
        assert storage[1] == sum(c.numel() * c.element_size() for c in cs), region
        assert storage[1] == math.prod(shapes[region]) * cs[0].element_size(), region
    lm = shapes["lm_kv"]
    with pytest.raises(FamilyError, match=r"lm_kv rings take more than the [\d,]+ values moshi"):
        make({**shapes, "lm_kv": (lm[0] - 1, *lm[1:])})
    wider = make({**shapes, "lm_kv": (lm[0] + 1, *lm[1:])})
    cs = caches(wider)["lm_kv"]
    (nbytes,) = {c.untyped_storage().nbytes() for c in cs}
    assert nbytes == math.prod(lm) * cs[0].element_size()
    assert len({c.untyped_storage().data_ptr() for c in cs}) == 1

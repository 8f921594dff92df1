"""The multiplexer on CUDA at the released shapes: sessions replaying concurrently on lanes (CUDA
streams), each with its own graph-safe generator state, equal each session alone in eager bit
for bit, across turn resets, turn ends and live arm switches (eager and S periods holding the
generator lock while the other sessions replay). Token2Wav's vocoder and Moshi's sampling draw
device randomness in every period, so a session drawing from another's stream would show.

Run with ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (``bench/run_gpu.sh`` sets it). Moshi's 7B takes
~16 GB and ~2 minutes here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapters.face import ModelRequest
from engine.arms import Arm
from tests.gpu_results import record
from tests.test_multiplex import moshi_sessions_equal_alone, token2wav_sessions_equal_alone
from tests.test_multiplex_converse import shared_sessions_equal_alone

pytestmark = pytest.mark.gpu


def test_token2wav_sessions_on_lanes_equal_each_alone_in_eager() -> None:
    request = ModelRequest(device="cuda", model_size="full", arm=Arm.SRC, seed=0)
    token2wav_sessions_equal_alone(request, lanes=2)


def test_converse_sessions_on_one_set_of_bindings_equal_each_alone_in_eager(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``converse --sessions 3`` at full size on CUDA: Token2Wav's sessions on one set of shared
    bindings (two admissions capturing nothing), each equal to itself alone in eager (5 periods
    each; the weights load twice: ~1 minute)."""
    shared_sessions_equal_alone(tmp_path, capsys, "cuda", "full")


def test_moshi_sessions_on_lanes_equal_each_alone_in_eager() -> None:
    request = ModelRequest(device="cuda", model_size="full", arm=Arm.SRC, seed=3)
    frames = int(os.environ.get("DUPLEXCADENCE_MULTIPLEX_FRAMES", "40"))
    moshi_sessions_equal_alone(request, lanes=2, frames=frames)


def test_an_engine_on_a_lane_shares_its_stream_and_copies_out() -> None:
    """A replay engine made while a session opens on a lane takes the lane's side stream and
    pool; it refuses an operator that would hand out the lane's static outputs."""
    import torch

    from engine.graph_lane import GraphLane, on_lane
    from engine.replay import ReplayEngine
    from engine.signature import Catalog

    lane = GraphLane(torch.device("cuda", torch.cuda.current_device()))
    with on_lane(lane):
        engine = ReplayEngine("cuda")
    assert engine.lane is lane and engine._stream is lane.stream
    with pytest.raises(ValueError, match="copy_out=False on a multiplexer lane"):
        engine.register("op", lambda x: x * 2, catalog=Catalog.any(), copy_out=False)


def test_token2wav_session_memory_against_its_declared_state() -> None:
    """Three sessions of one voice on one lane: the third admission allocates no more than the
    session's declared state plus its own graphs' static outputs (the conformer caches each
    flow class returns) and the allocator's rounding; no stock state, no second prompt state,
    no second pool or stream cache. What it takes outside the allocator (its graphs'
    executables: the device-memory drop beyond what the allocator reserved) is recorded, not
    bounded: per-session bindings keep it, one set of bindings per lane would not
    (docs/scaling.md)."""
    import torch

    from adapters.registry import family
    from engine.multiplex import Capacity, Multiplexer, SessionRng
    from tests.test_multiplex import _quiet

    request = ModelRequest(device="cuda", model_size="full", arm=Arm.SRC, seed=0)
    source = family("synthetic").load_sessions(request, _quiet)
    mux = Multiplexer(torch.device("cuda"), Capacity(lanes=1))
    engines = []

    def opener(rng: SessionRng) -> tuple[object, None]:
        speech, _ = source.open_speech(1000 + len(engines), Arm.SRC, rng.eager, voice=1000)
        engines.append(speech.replay)
        return speech.speech.push, None

    used, allocated, reserved = [], [], []
    for _ in range(3):
        torch.cuda.synchronize()
        before = torch.cuda.mem_get_info()[0]
        alloc0, res0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        mux.admit(opener, seed=1000 + len(engines), period_s=source.period_s)
        torch.cuda.synchronize()
        used.append(before - torch.cuda.mem_get_info()[0])
        allocated.append(torch.cuda.memory_allocated() - alloc0)
        reserved.append(torch.cuda.memory_reserved() - res0)
    declared = source.state_bytes(Arm.SRC)
    outputs = sum(
        t.untyped_storage().nbytes()
        for cls in engines[-1]._classes.values()
        if cls.binding is not None
        for t in _tensors(cls.binding.outputs)
    )
    record(
        "multiplex_session_memory",
        admission_mib=[round(u / 2**20, 1) for u in used],
        allocated_mib=[round(a / 2**20, 1) for a in allocated],
        reserved_mib=[round(r / 2**20, 1) for r in reserved],
        outside_allocator_mib=[
            round((u - r) / 2**20, 1) for u, r in zip(used, reserved, strict=True)
        ],
        declared_mib=round(declared / 2**20, 1),
        static_outputs_mib=round(outputs / 2**20, 1),
        pool=mux.graph_lanes[0].pool_bytes(),
    )
    assert allocated[2] <= declared + outputs + (16 << 20), (allocated, declared, outputs)
    mux.shutdown()


def _tensors(obj: object) -> list[object]:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, tuple | list):
        return [t for item in obj for t in _tensors(item)]
    return []


# -- one set of Token2Wav bindings per lane and voice (adapters.token2wav.shared) ----------------


def test_shared_bindings_hand_each_session_its_own_random_stream() -> None:
    """Small config, two lanes: sessions of one voice on one lane's bindings (graphs captured
    once, under the bindings' own generator state), interleaved with different inputs, turn
    resets and arm switches, each equal itself alone in eager bit for bit. The vocoder draws
    device randomness inside its replayed graphs, so the seed and Philox offset handed in and
    read back around each period are what make each session draw its own numbers."""
    from tests.test_shared_bindings import REQUEST, shared_sessions_equal_alone

    request = ModelRequest(
        device="cuda", model_size="small", arm=Arm.SRC, seed=0, n_steps=REQUEST.n_steps
    )
    for lanes in (1, 2):
        got = shared_sessions_equal_alone(request, lanes=lanes)
        vocoder = got["sessions"][31].model.replay._ops["hift_chunk"]
        assert vocoder.captured() and vocoder.counters.hits > 0  # drew inside graphs


def test_shared_token2wav_session_memory_is_its_declared_state() -> None:
    """Full size, one lane, three sessions of one voice: the first captures the bindings; the
    later two capture nothing and each allocates its carry and conv region (the plan's bounds,
    575 MiB) and nothing else: device memory per added session within the declared state
    (592.9 MiB) plus the allocator's 2-MiB rounding; the admission is an allocation and a copy.
    """
    import time

    import torch

    from adapters.registry import family
    from engine.multiplex import Capacity, Multiplexer, SessionRng
    from engine.plan import make_plan
    from tests.test_multiplex import _quiet

    request = ModelRequest(device="cuda", model_size="full", arm=Arm.SRC, seed=0)
    source = family("synthetic").load_sessions(request, _quiet)
    mux = Multiplexer(torch.device("cuda"), Capacity(lanes=1))
    opened: list[tuple[object, dict[str, object]]] = []

    def opener(rng: SessionRng) -> tuple[object, object]:
        session, info = source.open_shared(1000 + len(opened), Arm.SRC, rng, voice=1000)
        opened.append((session, info))
        return (lambda payload: None), session.close

    used, allocated, seconds = [], [], []
    for _ in range(3):
        torch.cuda.synchronize()
        before, alloc0 = torch.cuda.mem_get_info()[0], torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        mux.admit(opener, seed=1000 + len(opened), period_s=source.period_s)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
        used.append(before - torch.cuda.mem_get_info()[0])
        allocated.append(torch.cuda.memory_allocated() - alloc0)
    declared = source.state_bytes(Arm.SRC)
    plan = make_plan(source.declaration, {"f_prompt": request.voice_frames})
    regions = plan.region("estimator_att").demand_bytes + plan.region("estimator_cnn").demand_bytes
    owned = [s.owned_bytes() for s, _ in opened]  # type: ignore[attr-defined]
    record(
        "multiplex_shared_session_memory",
        admission_mib=[round(u / 2**20, 1) for u in used],
        allocated_mib=[round(a / 2**20, 1) for a in allocated],
        owned_mib=[round(o / 2**20, 1) for o in owned],
        admission_s=[round(s, 3) for s in seconds],
        captures=[info["captures"] for _, info in opened],
        declared_mib=round(declared / 2**20, 1),
        regions_mib=round(regions / 2**20, 1),
    )
    assert [info["captures"] for _, info in opened][1:] == [0, 0]
    assert max(seconds[1:]) < 1.0, seconds  # an allocation and a copy
    assert owned[1:] == [regions, regions]
    for k in (1, 2):
        assert allocated[k] <= regions + (4 << 20), (allocated, regions)
        assert used[k] <= declared + (4 << 20), (used, declared)
    mux.shutdown()


def test_a_session_closed_on_a_lane_leaves_the_others_graphs_whole() -> None:
    """Closing one session on a lane destroys its graphs, and torch frees the cuBLAS workspace of
    the stream they were captured on, which the lane's other sessions' graphs were captured with
    too (pytorch/pytorch#193402). The other sessions' replays must still equal eager and write
    nothing into memory allocated since, before and after the cache is emptied. Run in a process
    of its own (``tests/gpu/lane_workspace.py``): a fault there must not take the others down."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "tests.gpu.lane_workspace"],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    record(
        "lane_workspace_after_close",
        returncode=run.returncode,
        stdout=run.stdout[-500:],
        stderr=run.stderr[-2000:],
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]

"""The multiplexer (engine.multiplex): N sessions of one family on one set of weights, each equal
bit for bit to the same session run alone in eager, whatever the others do (different inputs,
turn resets, arm switches), with its own random stream; earliest deadline first; admission
refused in one line; a closed session's state freed at once. CPU, small configs (CI)."""

from __future__ import annotations

import gc
import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from adapters.face import ModelRequest
from adapters.registry import family
from engine.arms import Arm
from engine.contract import DTYPE_BYTES
from engine.multiplex import AdmissionRefused, Capacity, Multiplexer, SessionRng
from tests.moshi_small import noise

CPU = torch.device("cpu")


def _quiet(stage: str, fraction: float) -> None:
    pass


# -- the engine alone ---------------------------------------------------------------------------


def test_session_rngs_draw_as_if_alone() -> None:
    """Interleaved draws of two sessions equal each one's draws alone, and the process's own
    generator is left where it was."""
    alone = {}
    for seed in (1, 2):
        torch.manual_seed(seed)
        alone[seed] = [torch.rand(3) for _ in range(4)]
    torch.manual_seed(99)
    before = torch.get_rng_state()
    rngs = {seed: SessionRng(CPU, seed) for seed in (1, 2)}
    drawn: dict[int, list[torch.Tensor]] = {1: [], 2: []}
    for i in range(4):
        for seed in (2, 1) if i % 2 else (1, 2):
            with rngs[seed].active():
                drawn[seed].append(torch.rand(3))
    assert torch.equal(torch.get_rng_state(), before)
    for seed in (1, 2):
        assert all(torch.equal(a, b) for a, b in zip(alone[seed], drawn[seed], strict=True))


def test_binding_rng_serves_each_session_its_own_stream() -> None:
    """Shared bindings' generator (``BindingRng``): sessions served in turn draw, through its
    eager guard, what each draws alone; it serves one at a time and nothing outside a span."""
    from engine.multiplex import BindingRng

    alone = {}
    for seed in (1, 2):
        torch.manual_seed(seed)
        alone[seed] = [torch.rand(3) for _ in range(4)]
    shared = BindingRng(CPU)
    rngs = {seed: SessionRng(CPU, seed) for seed in (1, 2)}
    drawn: dict[int, list[torch.Tensor]] = {1: [], 2: []}
    for i in range(4):
        for seed in (2, 1) if i % 2 else (1, 2):
            with rngs[seed].active(), shared.serving(rngs[seed]), shared.eager():
                drawn[seed].append(torch.rand(3))
    for seed in (1, 2):
        assert all(torch.equal(a, b) for a, b in zip(alone[seed], drawn[seed], strict=True))
    with (
        pytest.raises(RuntimeError, match="one session at a time"),
        shared.serving(rngs[1]),
        shared.serving(rngs[2]),
    ):
        pass
    with pytest.raises(RuntimeError, match="outside a session's span"):
        shared.eager()


def _echo(rng: SessionRng) -> tuple[Callable[[Any], Any], None]:
    return (lambda payload: payload), None


def test_earliest_deadline_first_and_in_order() -> None:
    """Due periods run by deadline (due + the session's period); a session's in its order."""
    mux = Multiplexer(CPU)
    fast = mux.admit(_echo, seed=0, period_s=0.08)
    slow = mux.admit(_echo, seed=1, period_s=1.0)
    mux.submit(slow, "s0", due=0.0)  # deadline 1.0
    for k in range(3):
        mux.submit(fast, f"f{k}", due=0.08 * k)  # deadlines 0.08, 0.16, 0.24
    mux.submit(fast, "f3", due=1.5)  # deadline 1.58
    done = mux.drain()
    assert [d.result for d in done] == ["f0", "f1", "f2", "s0", "f3"]
    assert [d.index for d in done if d.session == fast] == [0, 1, 2, 3]


@pytest.mark.parametrize("lanes", [2, 1])
def test_a_session_opens_while_the_others_speak(lanes: int) -> None:
    """An admission from a second thread opens beside the admitted sessions' periods: on two
    lanes the opener sees another lane's periods end while it runs (it waits for two of them),
    and each of its engine's replays takes its lane's turn; on one lane the opening holds the
    lane's turn throughout, so no period ends while it runs. It closes from that thread too."""
    import threading

    mux = Multiplexer(CPU, Capacity(lanes=lanes))
    ends, ended = [0], threading.Condition()

    def counted(rng: SessionRng) -> tuple[Callable[[Any], Any], None]:
        def step(payload: Any) -> Any:
            with ended:
                ends[0] += 1
                ended.notify_all()
            return payload

        return step, None

    speaking = mux.admit(counted, seed=0, period_s=0.01)
    mux.start()
    seen: list[bool] = []

    def opener(rng: SessionRng) -> tuple[Callable[[Any], Any], None]:
        with ended:  # two periods end while it opens
            start = ends[0]
            wait = 10.0 if lanes > 1 else 0.5  # one lane: no period can end, however long
            seen.append(ended.wait_for(lambda: ends[0] >= start + 2, timeout=wait))
        return _echo(rng)

    admitted: list[int] = []
    admission = threading.Thread(
        target=lambda: admitted.append(mux.admit(opener, seed=1, period_s=0.01))
    )
    admission.start()
    while admission.is_alive():
        mux.submit(speaking, "p")
        mux.drain(timeout=5)
    admission.join()
    assert seen == [lanes > 1]
    assert lanes == 1 or mux.lane_of(admitted[0]) != mux.lane_of(speaking)
    mux.submit(admitted[0], "q")
    assert [d.result for d in mux.drain(timeout=5)] == ["q"]
    closing = threading.Thread(target=mux.close, args=(admitted[0],))
    closing.start()  # and it closes while the other speaks
    while closing.is_alive():
        mux.submit(speaking, "p")
        mux.drain(timeout=5)
    closing.join()
    assert mux.sessions == (speaking,)
    mux.shutdown()


def test_a_lane_that_dies_is_raised_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane thread that fails outside a period (on the H200 its set_device refused a device
    without an index, and the bench waited for its periods until killed) makes ``drain`` raise
    at once with the cause."""
    mux = Multiplexer(CPU)

    def broken(lane: int) -> None:
        raise ValueError("no such device")

    monkeypatch.setattr(mux, "_serve", broken)
    sid = mux.admit(_echo, seed=0, period_s=1.0)
    mux.start()
    mux.submit(sid, "p0")
    with pytest.raises(RuntimeError, match="lane stopped: no such device"):
        mux.drain(timeout=30)


def test_admission_refuses_in_one_line_and_close_frees() -> None:
    """Over the measured count: one line naming the fix; a closed session's state is gone at
    once and its place can be taken again."""
    state: list[weakref.ref[torch.Tensor]] = []

    def opener(rng: SessionRng) -> tuple[Callable[[Any], Any], None]:
        buffer = torch.zeros(1024)
        state.append(weakref.ref(buffer))
        return (lambda payload: buffer.add_(payload).sum()), None

    mux = Multiplexer(CPU, Capacity(sessions=2, source="bench/results/capacity_h200.json"))
    a = mux.admit(opener, seed=0, period_s=1.0)
    mux.admit(opener, seed=1, period_s=1.0)
    with pytest.raises(AdmissionRefused) as refused:
        mux.admit(opener, seed=2, period_s=1.0)
    line = str(refused.value)
    assert "\n" not in line and "capacity_h200.json" in line and "another replica" in line
    mux.submit(a, 1.0)
    assert mux.drain()[0].result == 1024.0
    mux.close(a)
    gc.collect()
    assert state[0]() is None and state[1]() is not None
    mux.admit(opener, seed=2, period_s=1.0)


def test_admission_from_measured_utilization() -> None:
    """One lane: a session whose periods would overfill the period is refused."""
    mux = Multiplexer(CPU, Capacity(utilization=0.5))
    sid = mux.admit(_echo, seed=0, period_s=1.0)
    for k in range(3):
        mux.submit(sid, k)
    mux.drain()
    mux.admit(_echo, seed=1, period_s=1.0, cost_s=0.1)
    with pytest.raises(AdmissionRefused, match="over the 50% limit"):
        mux.admit(_echo, seed=2, period_s=1.0, cost_s=0.6)


def test_a_lane_probes_a_class_once() -> None:
    """A class probed by one session's engine on a lane is captured at its first sight by a
    later session's engine there (``lane_probe``): no eager call of its own, the same output;
    a class whose probe drew host randomness is rejected from the lane's record (its call runs
    eagerly, as every rejected class's does); another lane, and an operator not marked, probe
    for themselves."""
    from engine.graph_lane import GraphLane, on_lane
    from engine.replay import ReplayEngine
    from engine.signature import Catalog

    lanes = [GraphLane(CPU, 0), GraphLane(CPU, 1)]

    def ops(lane: GraphLane, marked: bool = True) -> tuple[Any, Any]:
        with on_lane(lane):
            replay = ReplayEngine(CPU, lane_probe=marked)
        double = replay.register("d", lambda x: x * 2, catalog=Catalog.any())
        noisy = replay.register("n", lambda x: x + torch.rand(()), catalog=Catalog.any())
        return double, noisy

    x = torch.arange(6.0).reshape(2, 3) + 1
    d1, n1 = ops(lanes[0])
    assert [torch.equal(d1(x), x * 2) for _ in range(3)] == [True] * 3
    assert [d1.last_decision, d1.counters.misses] == ["replay", {"warmup": 1}]
    n1(x)
    d2, n2 = ops(lanes[0])
    assert torch.equal(d2(x), x * 2) and d2.last_decision == "capture"
    assert d2.counters.misses == {} and d2.counters.lane_probes == 1
    n2(x)
    assert n2.last_decision == "eager:host_randomness" and n2.counters.rejections == 1
    d3, _ = ops(lanes[1])  # another lane's stream has not run the class
    d4, _ = ops(lanes[0], marked=False)
    d3(x), d4(x)
    assert d3.counters.misses == d4.counters.misses == {"warmup": 1}


# -- Token2Wav ----------------------------------------------------------------------------------

T2W_REQUEST = ModelRequest(device="cpu", model_size="small", arm=Arm.SRC, seed=0, n_steps=2)

# Each session's calls: a window of n tokens, "last:n" a turn's last, "reset" a turn reset,
# an Arm a switch. Different windows, turn ends and arms at different moments.
T2W_CALLS: dict[int, list[Any]] = {
    11: [28, 28, Arm.S, 28, "last:3", "reset", 28, Arm.SRC, 28, 28],
    12: [28, "last:3", "reset", 28, 28, Arm.SR, 28, 28, "last:10", "reset", 28],
    13: [28, 28, "last:3", "reset", 28],
}
# The voice each session speaks with (seeds a random voice): 11 and 12 share one, so they share
# its prompt-only state and, on one lane, their graphs' staging buffers; 13 has its own.
T2W_VOICES = {11: 11, 12: 11, 13: 13}


def _t2w_payloads(
    seed: int, device: str = "cpu", calls: dict[int, list[Any]] | None = None
) -> list[tuple[Any, ...]]:
    g = torch.Generator().manual_seed(seed + 1000)
    out: list[tuple[Any, ...]] = []
    for item in (T2W_CALLS if calls is None else calls)[seed]:
        if isinstance(item, Arm):
            out.append(("arm", item))
        elif item == "reset":
            out.append(("reset",))
        else:
            n = int(str(item).split(":")[-1])
            tokens = torch.randint(0, 6561, (1, n), generator=g, dtype=torch.int32)
            out.append(("push", tokens.to(device), isinstance(item, str)))
    return out


def _speech_stepper(speech: Any) -> Callable[[tuple[Any, ...]], Any]:
    return lambda payload: speech_call(speech, payload)


def speech_call(speech: Any, payload: tuple[Any, ...]) -> Any:
    """One payload of :func:`_t2w_payloads` on a speech stream: a switch, a reset or a push."""
    if payload[0] == "arm":
        speech.set_arm(payload[1])
    elif payload[0] == "reset":
        speech.reset()
    else:
        return speech.push(payload[1], payload[2]).cpu()
    return None


def test_token2wav_sessions_equal_each_alone_in_eager() -> None:
    token2wav_sessions_equal_alone(T2W_REQUEST, lanes=1)


def token2wav_sessions_equal_alone(request: ModelRequest, lanes: int) -> None:
    """Each session interleaved with the others (on ``lanes``) equals itself alone in eager."""
    device = torch.device(request.device)
    source = family("synthetic").load_sessions(request, _quiet)
    alone: dict[int, list[Any]] = {}
    for seed in T2W_CALLS:  # each session alone, eager, no warm-up: its stream from the start
        speech = source.speech(source.voice(T2W_VOICES[seed]), Arm.EAGER)
        step = _speech_stepper(speech.speech)
        with SessionRng(device, seed).active():
            alone[seed] = [step(p) for p in _t2w_payloads(seed, request.device)]

    mux = Multiplexer(device, Capacity(lanes=lanes))
    sids = {}
    streams: dict[int, Any] = {}
    for seed in T2W_CALLS:

        def opener(rng: SessionRng, seed: int = seed) -> tuple[Callable[[Any], Any], None]:
            speech, _ = source.open_speech(seed, Arm.SRC, rng.eager, voice=T2W_VOICES[seed])
            streams[seed] = speech.speech
            return _speech_stepper(speech.speech), None

        sid = mux.admit(
            opener,
            seed=seed,
            period_s=source.period_s,
            eager_periods=lambda payload, seed=seed: not streams[seed].arm.replay,
        )
        sids[sid] = seed
    if lanes > 1:
        mux.start()
    for sid, seed in sids.items():  # interleaved: the second session half a period behind
        for k, payload in enumerate(_t2w_payloads(seed, request.device)):
            mux.submit(sid, payload, due=k + 0.5 * sid)
    done = mux.drain()
    if lanes == 1:
        assert [d.session for d in done[:6]] == [0, 1, 2, 0, 1, 2]
    flows = {seed: stream.flow for seed, stream in streams.items()}
    # One prompt-only state per voice, no stock state in any session (the state rule only).
    assert flows[11].rule.carry.base is flows[12].rule.carry.base
    assert flows[13].rule.carry.base is not flows[11].rule.carry.base
    assert all(flow.stock is None for flow in flows.values())
    with pytest.raises(ValueError, match=r"runs the state rule only\): choose S, SR or SRc"):
        streams[11].set_arm(Arm.EAGER)
    if lanes == 1:  # one lane: a class's staging buffers are one for every session
        staged = [_staged(stream.replay) for stream in streams.values()]
        shared = set(staged[0]) & set(staged[1])
        assert shared and all(staged[0][key] == staged[1][key] for key in shared)
    for sid, seed in sids.items():
        got = [d.result for d in sorted(done, key=lambda d: d.index) if d.session == sid]
        assert len(got) == len(alone[seed])
        for k, (a, b) in enumerate(zip(alone[seed], got, strict=True)):
            assert (a is None) == (b is None), (seed, k)
            assert a is None or torch.equal(a, b), f"session {seed} call {k} differs"
    mux.shutdown()


def test_token2wav_admission_work_on_a_lane() -> None:
    """The work one Token2Wav admission does (its warm-up), counted: the first session on a
    lane (before lane probes: every session) probes each class with an eager call and drives
    its turns twice (14 calls: 5 flow
    probes, 5 flow captures; the vocoder's classes draw host randomness on the CPU, so they run
    eagerly); a later session on the lane takes the lane's probes (8 classes) and drives each
    turn once (7 calls, no probe), capturing the same classes; every catalog class it captured
    before traffic is captured still. Equality with eager alone is
    ``test_token2wav_sessions_equal_each_alone_in_eager`` (three sessions on one lane)."""
    source = family("synthetic").load_sessions(T2W_REQUEST, _quiet)
    mux = Multiplexer(CPU, Capacity(lanes=2))
    warmups, captured = [], []
    for seed in (21, 22, 23):  # lanes 0, 1, 0

        def opener(rng: SessionRng, seed: int = seed) -> tuple[Callable[[Any], Any], None]:
            speech, warmup = source.open_speech(seed, Arm.SRC, rng.eager, voice=21)
            warmups.append(warmup)
            captured.append(sorted(map(str, speech.replay._ops["flow_chunk[carry]"].captured())))
            return _speech_stepper(speech.speech), None

        mux.admit(opener, seed=seed, period_s=source.period_s)
    work = [
        {k: w[k] for k in ("steps", "eager_warmups", "lane_probes", "captures")} for w in warmups
    ]
    first = {"steps": 14, "eager_warmups": 5, "lane_probes": 0, "captures": 5}
    assert work == [first, first, {"steps": 7, "eager_warmups": 0, "lane_probes": 8, "captures": 5}]
    assert [w["eager_calls"] for w in warmups] == [19, 19, 7]  # 14 / 14 / 7 of them the vocoder's
    assert captured[2] == captured[0] and len(captured[0]) == 5
    mux.shutdown()


def _staged(replay: Any) -> dict[Any, list[int]]:
    """Each captured class's staging buffers (their addresses), by operator and signature."""
    return {
        key: [buf.data_ptr() for _, buf in cls.binding.staged]
        for key, cls in replay._classes.items()
        if cls.binding is not None and cls.binding.staged
    }


# -- Moshi --------------------------------------------------------------------------------------

MOSHI_REQUEST = ModelRequest(device="cpu", model_size="small", arm=Arm.SRC, seed=3)
MOSHI_FRAMES = 12
MOSHI_EVENTS: dict[int, dict[int, Any]] = {  # frame -> a reset or an arm switch before it
    21: {4: "reset", 6: Arm.S, 9: Arm.EAGER},
    22: {3: Arm.SR, 7: "reset", 10: Arm.SRC},
    23: {2: Arm.R, 5: "reset", 8: Arm.SRC},  # opens while 21 and 22 speak, on 21's lane
}


def _moshi_stepper(model: Any) -> Callable[[tuple[Any, np.ndarray]], Any]:
    def step(payload: tuple[Any, np.ndarray]) -> Any:
        event, mic = payload
        if event == "reset":
            model.reset()
        elif isinstance(event, Arm):
            model.set_arm(event)
        out = model.step(mic)
        pcm = out.audio[0].cpu() if out.audio else None
        return out.facts["tokens"], pcm

    return step


def _arm_of(payload: tuple[Any, np.ndarray], model: Any) -> Arm:
    """The arm a period runs under: the one its input switches to, else the model's."""
    return payload[0] if isinstance(payload[0], Arm) else model.arm


def _moshi_payloads(seed: int, frames_n: int = MOSHI_FRAMES) -> list[tuple[Any, np.ndarray]]:
    frames = noise(frames_n, seed=seed + 100)
    events = MOSHI_EVENTS[seed]
    return [(events.get(i), f.reshape(-1).numpy()) for i, f in enumerate(frames)]


def test_moshi_sessions_equal_each_alone_in_eager() -> None:
    moshi_sessions_equal_alone(MOSHI_REQUEST, lanes=2, frames=MOSHI_FRAMES)


def moshi_sessions_equal_alone(request: ModelRequest, lanes: int, frames: int) -> None:
    """Each session on ``lanes`` beside the others equals itself alone in eager; the last one
    opens (from a second thread: its warm-up, captures and replays) while the others speak, on
    the lane of one of them (the first, with two lanes)."""
    import threading

    device = torch.device(request.device)
    source = family("moshi").load_sessions(request, _quiet)
    alone: dict[int, list[Any]] = {}
    for seed in MOSHI_EVENTS:
        with SessionRng(device, seed).active():
            loaded = source.open(seed, Arm.EAGER, only_own_arm=True)  # eager: nothing to warm
            step = _moshi_stepper(loaded.model)
            alone[seed] = [step(p) for p in _moshi_payloads(seed, frames)]
        assert loaded.close is not None
        loaded.close()

    # Two lanes (threads): eager calls run under each session's generator and the lock; a
    # period under an arm that does not replay holds them throughout.
    mux = Multiplexer(device, Capacity(lanes=lanes))
    sids = {}
    models: dict[int, Any] = {}

    def admit(seed: int) -> None:
        def opener(rng: SessionRng) -> tuple[Callable[[Any], Any], Any]:
            loaded = source.open(seed, Arm.SRC, rng.eager)
            models[seed] = loaded.model
            return _moshi_stepper(loaded.model), loaded.close

        sid = mux.admit(
            opener,
            seed=seed,
            period_s=source.period_s,
            eager_periods=lambda payload: not _arm_of(payload, models[seed]).replay,
        )
        sids[sid] = seed

    *first, last = MOSHI_EVENTS
    for seed in first:
        admit(seed)
    mux.start()
    period = source.period_s

    def speak(sid: int, seed: int) -> None:
        for k, payload in enumerate(_moshi_payloads(seed, frames)):
            mux.submit(sid, payload, due=period * (k + 0.5 * sid))

    for sid, seed in list(sids.items()):
        speak(sid, seed)
    late = threading.Thread(target=admit, args=(last,))
    late.start()  # opens while the others' periods run
    done = mux.drain()
    late.join()
    (sid,) = (sid for sid, seed in sids.items() if seed == last)
    assert lanes > 2 or mux.lane_of(sid) == mux.lane_of(next(iter(sids)))
    speak(sid, last)
    done += mux.drain()
    for sid, seed in sids.items():
        got = [d.result for d in sorted(done, key=lambda d: d.index) if d.session == sid]
        for k, ((tok_a, pcm_a), (tok_b, pcm_b)) in enumerate(zip(alone[seed], got, strict=True)):
            assert tok_a == tok_b, f"session {seed} frame {k}: tokens differ"
            assert (pcm_a is None) == (pcm_b is None)
            assert pcm_a is None or torch.equal(pcm_a, pcm_b), f"session {seed} frame {k}"
    mux.shutdown()


def test_moshi_declared_state_is_every_ring_a_session_holds() -> None:
    """The state a Moshi session declares (what admission and the capacity bench compare its
    memory with) counts every ring it holds: the temporal transformer's, the depformer's and
    Mimi's, Mimi's convolution tails, the streams' positions, flags and small constants and the
    frame's own tensors, element for element (the CPU's LM rings and hidden state are float32
    where CUDA's are bf16)."""
    from adapters.moshi.config import state_bytes
    from engine.plan import make_plan

    source = family("moshi").load_sessions(MOSHI_REQUEST, _quiet)
    loaded = source.open(0, Arm.EAGER, only_own_arm=True)
    stream = loaded.model.stream
    held = {region: sum(r.cache.numel() for r in rings) for region, rings in stream.rings().items()}
    states = [getattr(m, "_streaming_state", None) for m in stream.ops.mimi.modules()]
    held["mimi_conv"] = sum(
        tail.numel()
        for state in states
        if state is not None
        for tail in vars(state).values()
        if isinstance(tail, torch.Tensor) and tail.dim() == 3  # (batch, channels, samples)
    )
    held["positions"] = stream.held_bytes()["positions"]  # bytes: its dims count bytes
    held |= {r: sum(t.numel() for t in ts) for r, ts in stream.regions.declared().items()}
    plan = make_plan(source.declaration, source.size.point)
    assert held == {r.name: math.prod(r.demand_shape) for r in plan.regions}
    declared = sum(
        math.prod(r.demand_shape) * DTYPE_BYTES[source.declaration.regions[r.name].dtype]
        for r in plan.regions
    )
    assert source.state_bytes(Arm.SRC) == state_bytes(source.declaration, source.size) == declared
    assert loaded.close is not None
    loaded.close()


@pytest.mark.parametrize("name", ["moshi", "personaplex"])
def test_the_released_streams_hold_exactly_their_declared_state(name: str) -> None:
    """At the released shapes (the vendor's 7B and Mimi, built on the meta device: shapes
    without memory), every tensor a stream keeps is a declared region's, to the byte: the
    rings, Mimi's convolution tails (``mimi_conv_values``), the positions, flags and small
    constants (``position_bytes``) and the frame's own tensors (``frame_*``). Every storage the
    stream made and still holds (the garbage collector's view, whoever holds it) is counted, so
    a tensor no region declares fails here, as does a ``moshi`` release that changes any of
    them, and not on the GPU when a session opens."""
    from moshi.models import loaders
    from moshi.models.lm import LMGen, LMModel

    from adapters.moshi.config import size_for, state_bytes
    from adapters.moshi.periods import check_regions
    from adapters.moshi.regions import ring_shapes
    from adapters.moshi.stream import MoshiStream
    from adapters.personaplex.config import lm_kwargs
    from adapters.personaplex.frame import PersonaPlexOps
    from engine.declaration_io import load_declaration
    from engine.replay import ReplayEngine

    declaration = load_declaration(name)
    size = size_for("full", declaration)
    kwargs = (
        lm_kwargs(size, loaders._lm_kwargs)
        if name == "personaplex"
        else size.lm_kwargs(loaders._lm_kwargs, None)
    )
    with torch.device("meta"):
        lm = LMModel(device="meta", dtype=torch.bfloat16, **kwargs).eval()
    mimi_config = size.mimi_config(loaders._mimi_config, None)
    mimi = loaders.get_mimi(None, mimi_config, device="meta", num_codebooks=size.point["audio_q"])
    before = _live_storages()
    stream = MoshiStream(
        mimi.eval(),
        LMGen(lm),
        replay=ReplayEngine(CPU),
        arm=Arm.EAGER,
        samples_per_frame=size.point["samples_per_frame"],
        sdpa="default",
        rings=ring_shapes(declaration, size.point),
        name=name,
        **({"ops": PersonaPlexOps} if name == "personaplex" else {}),
    )
    check_regions(stream, declaration, size.point)
    held = stream.held_bytes()
    assert held["positions"] == size.point["position_bytes"]
    assert stream.conv_values() == size.point["mimi_conv_values"]
    assert sum(held.values()) == state_bytes(declaration, size)
    made = {k: n for k, n in _live_storages().items() if k not in before}
    kept = {t.untyped_storage()._cdata for ts in stream._held().values() for t in ts}
    assert set(made) == kept
    assert sum(made.values()) == sum(held.values())


def _live_storages() -> dict[int, int]:
    """Every meta tensor's storage alive now (the garbage collector's view; the meta device,
    where nothing else in the process makes tensors): its bytes by identity."""
    gc.collect()
    tensors = (o for o in gc.get_objects() if issubclass(type(o), torch.Tensor))
    storages = (t.untyped_storage() for t in tensors if t.device.type == "meta")
    return {s._cdata: s.nbytes() for s in storages}


def test_moshi_sessions_share_mimis_codebooks() -> None:
    """Mimi's codebooks (made on first use by ``moshi``) are made once on the weights: a
    session's twin uses them in place, so a session holds no codebook of its own (16 MiB each
    at the released size before)."""
    from moshi.quantization.core_vq import EuclideanCodebook

    def codebooks(mimi: torch.nn.Module) -> list[int]:
        return [
            m._embedding.data_ptr()
            for m in mimi.modules()
            if isinstance(m, EuclideanCodebook) and m._embedding is not None
        ]

    source = family("moshi").load_sessions(MOSHI_REQUEST, _quiet)
    shared = codebooks(source.models.mimi)
    assert len(shared) == source.size.point["audio_q"]  # the levels a quantizer uses, no more
    loaded = source.open(0, Arm.EAGER, only_own_arm=True)
    spf = source.size.point["samples_per_frame"]
    for i in range(2):
        loaded.model.step(np.random.default_rng(i).standard_normal(spf).astype(np.float32) / 8)
    assert codebooks(loaded.model.stream.ops.mimi) == shared
    assert loaded.close is not None
    loaded.close()

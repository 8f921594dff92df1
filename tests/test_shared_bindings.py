"""One set of Token2Wav bindings per lane and voice (adapters.token2wav.shared): each session owns
only its state, copied into the lane's bound state before its period and out after; every
session equals itself alone in eager bit for bit while others interleave on the same bindings
with different inputs, turn resets and arm switches; a later admission captures nothing; a
session owns exactly its declared regions. CPU, the small config (CI); the CUDA proof of the
generator handoff is ``tests/gpu/test_multiplex_gpu.py``."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

from adapters.face import ModelRequest
from adapters.registry import family
from engine.arms import Arm
from engine.multiplex import Capacity, Multiplexer, SessionRng
from engine.plan import make_plan
from tests.test_multiplex import _t2w_payloads, speech_call

REQUEST = ModelRequest(device="cpu", model_size="small", arm=Arm.SRC, seed=0, n_steps=2)

# Each session's calls (as tests/test_multiplex.py): n tokens, "last:n" a turn's last call,
# "reset" a turn reset, an Arm a switch. 31, 32 and 33 speak one voice (one set of bindings
# per lane), 34 another.
CALLS: dict[int, list[Any]] = {
    31: [28, 28, Arm.S, 28, "last:3", "reset", 28, Arm.SRC, 28, 28],
    32: [28, "last:3", "reset", 28, 28, Arm.SR, 28, 28, "last:10", "reset", 28],
    33: [28, 28, 28, 28, "last:3", "reset", 28, 28],
    34: [28, 28, "last:3", "reset", 28],
}
VOICES = {31: 31, 32: 31, 33: 31, 34: 34}


def _quiet(stage: str, fraction: float) -> None:
    pass


def payloads(seed: int, device: str = "cpu") -> list[tuple[Any, ...]]:
    return _t2w_payloads(seed, device, CALLS)


def shared_sessions_equal_alone(request: ModelRequest, lanes: int) -> dict[str, Any]:
    """Each session on its lane's shared bindings, interleaved with the others, equals itself
    alone in eager; returns what the admissions did."""
    device = torch.device(request.device)
    source = family("synthetic").load_sessions(request, _quiet)
    alone: dict[int, list[Any]] = {}
    for seed in CALLS:
        speech = source.speech(source.voice(VOICES[seed]), Arm.EAGER)
        with SessionRng(device, seed).active():
            alone[seed] = [speech_call(speech.speech, p) for p in payloads(seed, request.device)]
        del speech

    mux = Multiplexer(device, Capacity(lanes=lanes))
    sessions: dict[int, Any] = {}
    infos: dict[int, dict[str, Any]] = {}
    sids: dict[int, int] = {}
    for seed in CALLS:

        def opener(rng: SessionRng, seed: int = seed) -> tuple[Callable[[Any], Any], Any]:
            session, info = source.open_shared(seed, Arm.SRC, rng, voice=VOICES[seed])
            sessions[seed], infos[seed] = session, info

            def step(payload: tuple[Any, ...]) -> Any:
                with session.period() as speech:
                    return speech_call(speech, payload)

            return step, session.close

        sid = mux.admit(
            opener,
            seed=seed,
            period_s=source.period_s,
            eager_periods=lambda payload, seed=seed: not sessions[seed].state.arm.replay,
        )
        sids[sid] = seed
    if lanes > 1:
        mux.start()
    for sid, seed in sids.items():  # interleaved: each session a quarter period behind
        for k, payload in enumerate(payloads(seed, request.device)):
            mux.submit(sid, payload, due=k + 0.25 * sid)
    done = mux.drain()
    for sid, seed in sids.items():
        got = [d.result for d in sorted(done, key=lambda d: d.index) if d.session == sid]
        errors = [d.error for d in done if d.session == sid and d.error is not None]
        assert not errors, errors
        assert len(got) == len(alone[seed])
        for k, (a, b) in enumerate(zip(alone[seed], got, strict=True)):
            assert (a is None) == (b is None), (seed, k)
            assert a is None or torch.equal(a, b), f"session {seed} call {k} differs"
    lanes_of = {seed: mux.lane_of(sid) for sid, seed in sids.items()}
    out = {"infos": infos, "sessions": sessions, "lanes": lanes_of, "source": source}
    mux.shutdown()
    return out


def test_shared_sessions_equal_each_alone_in_eager() -> None:
    """One lane: 31, 32 and 33 run on one set of bindings (one voice), 34 on its own; the
    first session of each voice captured it, the later ones captured nothing."""
    got = shared_sessions_equal_alone(REQUEST, lanes=1)
    infos, sessions = got["infos"], got["sessions"]
    assert [infos[s]["bindings"] for s in CALLS] == ["captured", "shared", "shared", "captured"]
    assert infos[31]["captures"] > 0 and infos[32]["captures"] == infos[33]["captures"] == 0
    assert infos[32]["steps"] == 0
    assert sessions[31].lane is sessions[32].lane is sessions[33].lane
    assert sessions[34].lane is not sessions[31].lane
    assert got["source"].shared_bindings() == 0  # closed with the last session on them


def test_shared_sessions_on_two_lanes_equal_each_alone_in_eager() -> None:
    """Two lanes (threads): a voice has one set of bindings per lane; eager calls under the
    serving session's generator and the lock."""
    got = shared_sessions_equal_alone(REQUEST, lanes=2)
    lanes, sessions = got["lanes"], got["sessions"]
    for a in CALLS:
        for b in CALLS:
            same = VOICES[a] == VOICES[b] and lanes[a] == lanes[b]
            assert (sessions[a].lane is sessions[b].lane) == same, (a, b)


def test_a_later_admission_captures_nothing_and_owns_its_declared_regions() -> None:
    """The second session of a voice on a lane drives no call and captures nothing (the
    bindings' graphs are the same objects, none added); what it owns is its carry and conv
    region at the plan's bounds; closing it frees them, and the bindings go with the last
    session on them."""
    source = family("synthetic").load_sessions(REQUEST, _quiet)
    mux = Multiplexer(torch.device("cpu"), Capacity(lanes=1))
    opened: list[tuple[Any, dict[str, Any]]] = []

    def opener(rng: SessionRng) -> tuple[Callable[[Any], Any], Any]:
        session, info = source.open_shared(40 + len(opened), Arm.SRC, rng, voice=40)
        opened.append((session, info))
        return (lambda payload: None), session.close

    first = mux.admit(opener, seed=40, period_s=source.period_s)
    replay = opened[0][0].model.replay
    graphs = _graphs(replay)
    assert opened[0][1]["captures"] == len(graphs) > 0
    second = mux.admit(opener, seed=41, period_s=source.period_s)
    session, info = opened[1]
    assert info["bindings"] == "shared" and info["captures"] == info["steps"] == 0
    assert _graphs(replay) == graphs  # the same bindings, none added
    assert session.lane is opened[0][0].lane

    # Its allocations: the carry at the plan's bound A and the conv region at its bound (the
    # small config's layers and heads are fewer than the declaration's; at full size the
    # bytes are the plan's, tests/gpu/test_multiplex_gpu.py); the conformer and the vocoder's
    # tails start as the voice's prompt-only ones, shared.
    plan = make_plan(source.declaration, {"f_prompt": REQUEST.voice_frames, "n_steps": 2})
    carry, cnn = session.state.rule.carry.buffer, session.state.rule.cnn
    assert carry.shape[0] == cnn.shape[0] == 2  # n_steps
    assert carry.shape[-2] == plan.region("estimator_att").bound
    assert cnn.shape[-1] == plan.region("estimator_cnn").bound
    assert session.owned_bytes() == (carry.numel() + cnn.numel()) * 4
    state = weakref.ref(session.state.rule.carry.buffer)
    mux.close(second)
    del session, opened[1], carry, cnn
    gc.collect()
    assert state() is None
    assert source.shared_bindings() == 1
    mux.close(first)
    assert source.shared_bindings() == 0


def _graphs(replay: Any) -> dict[Any, int]:
    """Each captured class's binding (its identity), by operator and signature."""
    return {key: id(c.binding) for key, c in replay._classes.items() if c.binding is not None}


def test_a_period_copies_state_in_and_out() -> None:
    """The lane's working carry holds the serving session's state only inside its period."""
    source = family("synthetic").load_sessions(REQUEST, _quiet)
    mux = Multiplexer(torch.device("cpu"), Capacity(lanes=1))
    opened: list[Any] = []

    def opener(rng: SessionRng) -> tuple[Callable[[Any], Any], Any]:
        session, _ = source.open_shared(50 + len(opened), Arm.SRC, rng, voice=50)
        opened.append(session)
        return (lambda payload: None), session.close

    mux.admit(opener, seed=50, period_s=source.period_s)
    mux.admit(opener, seed=51, period_s=source.period_s)
    a, b = opened
    tokens = payloads(31)[0][1]
    with a.period() as speech:
        speech.push(tokens, False)
        extent = speech.flow.rule.carry.extent
    assert a.state.rule.carry.extent == extent != b.state.rule.carry.extent
    with b.period() as speech:
        assert speech.flow.rule.carry.extent == b.state.rule.carry.extent
    with pytest.raises(RuntimeError, match="one session at a time"), a.period(), b.period():
        pass
    mux.shutdown()


def test_a_conversation_on_shared_bindings_copies_state_only_for_calls() -> None:
    """``open_multiplexed`` (``converse --sessions N``): a listening period (no decoder call)
    copies no state; a reset between periods is one span; the session keeps its own arm
    between periods and refuses the stock path."""
    import numpy as np

    source = family("synthetic").load_sessions(REQUEST, _quiet)
    mux = Multiplexer(torch.device("cpu"), Capacity(lanes=1))
    opened: list[Any] = []

    def opener(rng: SessionRng) -> tuple[Callable[[Any], Any], Any]:
        loaded = source.open_multiplexed(60 + len(opened), Arm.SRC, rng, voice=60)
        opened.append(loaded)
        return loaded.model.step, loaded.close

    for seed in (60, 61):
        mux.admit(opener, seed=seed, period_s=source.period_s)
    a, b = (loaded.model for loaded in opened)
    assert [loaded.warmup["bindings"] for loaded in opened] == ["captured", "shared"]
    lane = a.shared.session.lane
    assert b.shared.session.lane is lane and lane.loads == 0
    silence = np.zeros(round(a.period_s * a.input_rate), np.float32)
    with SessionRng(torch.device("cpu"), 60).active():
        step = a.step(silence)
    assert not step.calls and lane.loads == 0
    b.reset()
    assert lane.loads == 1
    b.set_arm(Arm.SR)
    assert b.arm == Arm.SR and a.arm == Arm.SRC
    with pytest.raises(ValueError, match="stock path"):
        b.set_arm(Arm.EAGER)
    mux.shutdown()
    assert source.shared_bindings() == 0

"""Audit mode on the Token2Wav flow stream: the shadow auditor beside every carry retention.

A small flow (``tests/token2wav_small.py``, seeded random weights) streams steady windows, flushes,
last chunks and turn resets under the state-rule arms with a strict auditor on its carry, checked
against the retention the declaration states. Every retention is audited and agrees, the carry
keeps one address, and every mel and state equals an audit-off stream's bit for bit. A carry that
retains in the wrong order is caught where the paper's development bug was: at the third call,
the first whose eviction reaches the prompt tail. Off, the stream runs exactly the same aten ops
as a stream that never had an auditor (no clone, no cat, no allocation).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from adapters.token2wav.declared import CARRY_REGION
from adapters.token2wav.stream import FlowStream
from engine.arms import ARMS, Arm
from engine.audit import AuditError, Auditor, Divergence
from engine.carry import Carry, RetentionRule, declared_retention
from engine.contract import Order
from engine.declaration_io import load_declaration
from engine.replay import ReplayEngine
from tests.token2wav_small import make_stream, random_voice, small_flow, token_calls

pytestmark = pytest.mark.usefixtures("one_thread")
STATE_ARMS = [Arm.S, Arm.SR, Arm.SRC]
PATTERN: list[int | str] = [28, 28, 28, 28, 13, "last:4", "reset", 28, 28, "last:10", "reset", 28]


def declared(prompt_frames: int, family: str = "minicpmo45_token2wav") -> RetentionRule:
    """The carry's region retention as the declaration states it at this prompt length."""
    decl = load_declaration(family)
    env = decl.values({"f_prompt": prompt_frames})
    return declared_retention(decl.regions[CARRY_REGION], env)


@pytest.fixture(scope="module")
def flow() -> Any:
    return small_flow(seed=1)


@pytest.mark.parametrize("arm", STATE_ARMS, ids=str)
def test_every_retention_is_audited_and_changes_nothing(flow: Any, arm: Arm) -> None:
    voice = random_voice(prompt_tokens=12, seed=2)
    plain = make_stream(flow, voice, arm)
    shadowed = make_stream(flow, voice, arm)
    auditor = Auditor(strict=True)
    shadowed.set_auditor(auditor, declared(voice.frames))
    ptr, before = shadowed.carry.data_ptr(), shadowed.carry.retentions
    calls = token_calls(PATTERN, seed=3)
    for tokens, last in calls:
        if tokens is None:
            plain.reset()
            shadowed.reset()
            continue
        assert torch.equal(plain.chunk(tokens, last), shadowed.chunk(tokens, last))
        a, b = plain.stock_state(), shadowed.stock_state()
        assert all(torch.equal(a[k], b[k]) for k in a)
    report = auditor.report()
    region = report.regions[CARRY_REGION]
    n_calls, n_resets = sum(t is not None for t, _ in calls), sum(t is None for t, _ in calls)
    assert region.retentions == n_calls == shadowed.carry.retentions - before
    assert report.ok and region.agreements == n_calls and region.resets == n_resets
    assert region.evictions > 0, "the pattern must reach the retention bound"
    assert region.distinct_addresses == 1 and shadowed.carry.data_ptr() == ptr


def test_arm_switches_with_audit_on_stay_exact(flow: Any) -> None:
    """Between S-family and stock arms: a switch into the state rule retains the stock state
    into the carry (audited too); stock arms write no carry, so they add no retention."""
    voice = random_voice(prompt_tokens=10, seed=4)
    eager = make_stream(flow, voice, Arm.EAGER, ReplayEngine("cpu", enabled=False))
    stream = make_stream(flow, voice, Arm.SRC)
    auditor = Auditor(strict=True)
    stream.set_auditor(auditor, declared(voice.frames))
    rng, expected = random.Random(5), 0
    for tokens, last in token_calls(PATTERN * 2, seed=6):
        if tokens is None:
            eager.reset()
            stream.reset()
            continue
        arm = rng.choice(ARMS)
        expected += arm.state_rule and not stream.arm.state_rule  # the switch's retain
        stream.set_arm(arm)
        expected += arm.state_rule  # the call's settle
        assert torch.equal(eager.chunk(tokens, last), stream.chunk(tokens, last)), arm
        a, b = eager.stock_state(), stream.stock_state()
        assert all(torch.equal(a[k], b[k]) for k in a), arm
    report = auditor.report()
    assert report.ok and report.retentions == expected > 0


def flip_order(stream: FlowStream) -> None:
    """The paper's development bug, injected: the carry retains append-ordered (its order flag
    flipped to oldest_first, counts unchanged) while the DiT prepends and the declaration says
    newest_first. Both keep a cache whole until eviction, so the bug hides for two calls."""
    carry = stream.carry
    carry.retention = dataclasses.replace(carry.retention, order=Order.OLDEST_FIRST)


@pytest.mark.parametrize("arm", [Arm.S, Arm.SRC], ids=str)
def test_wrong_retention_is_localized_at_the_third_call(flow: Any, arm: Arm) -> None:
    voice = random_voice(prompt_tokens=12, seed=7)  # P = 24 prompt frames
    P = voice.frames
    stream = make_stream(flow, voice, arm)
    seen: list[Divergence] = []
    auditor = Auditor(on_divergence=seen.append)
    stream.set_auditor(auditor, declared(P))
    flip_order(stream)
    for tokens, last in token_calls([28] * 5, seed=8):  # 50 frames a call: P, P+50, P+100, ...
        stream.chunk(tokens, last)
    report = auditor.report()
    div = report.first_divergence
    assert div is not None and seen == [div], "reported once, at the first divergence"
    # Call 2 retains H of P + 150 frames: declared newest_first keeps H[:P] ‖ H[-100:]; the
    # flipped carry keeps H[:100] ‖ H[-P:]. Frames [0, P) agree; frame P is the first wrong one,
    # in the retained prompt run [P, P + 100) taken from H[P + 50 : P + 150].
    assert (div.region, div.call, div.dim) == (CARRY_REGION, 2, 4)
    assert (div.part, div.slice, div.source) == ("prompt", (P, P + 100), (P + 50, P + 150))
    assert div.index[4] == P and (div.expected_extent, div.actual_extent) == (P + 100, P + 100)
    assert "retention call 2" in div.describe() and f"[{P}, {P + 100})" in div.describe()
    assert report.agreements == 2 and report.divergences == report.retentions - 2 > 0


def test_strict_audit_raises_at_the_divergent_call(flow: Any) -> None:
    voice = random_voice(prompt_tokens=12, seed=7)
    stream = make_stream(flow, voice, Arm.S)
    stream.set_auditor(Auditor(strict=True), declared(voice.frames))
    flip_order(stream)
    done = 0
    with pytest.raises(AuditError, match=r"estimator_att.*call=2"):
        for tokens, last in token_calls([28] * 5, seed=8):
            stream.chunk(tokens, last)
            done += 1
    assert done == 2


def test_a_write_through_at_the_wrong_end_is_caught_with_the_live_copy() -> None:
    """``settle`` with the pre-call copy shadows the concatenation too: an operator that wrote
    ``cat([old, new])`` under a newest_first declaration diverges at once, though the carry's
    retention of what it was handed is self-consistent (and passes without the copy)."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(2, 30, 3, generator=gen)
    rule = RetentionRule(1, 10, 30, Order.NEWEST_FIRST)
    results = []
    for with_live in (False, True):
        carry = Carry(base, dim=1, prompt=10, history=30, order=Order.NEWEST_FIRST, capacity=60)
        auditor = Auditor()
        auditor.declare("x", rule)
        live = carry.view().clone()
        new = torch.randn(2, 20, 3, generator=gen)
        carry.buffer.narrow(1, 30, 20).copy_(new)  # appended: the wrong end for this layout
        auditor.settle("x", carry, 50, live if with_live else None)
        results.append(auditor.report().first_divergence)
    assert results[0] is None
    div = results[1]
    assert div is not None and (div.call, div.part, div.slice, div.source) == (
        0,
        "history",
        (0, 30),
        (0, 30),
    )


def test_declared_retention_is_the_carrys() -> None:
    """The rule the auditor checks against is the one the stream's carry keeps."""
    voice = random_voice(prompt_tokens=12, seed=2)
    stream = make_stream(small_flow(seed=1), voice, Arm.S)
    assert declared(voice.frames) == stream.carry.retention
    assert declared(24) == RetentionRule(4, 100, 24, Order.NEWEST_FIRST)


class _Ops(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records every aten op dispatched (factories and copies included)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def ops_of(stream: FlowStream, calls: list[tuple[Any, bool]]) -> list[str]:
    stream.reset()
    rec = _Ops()
    with rec:
        for tokens, last in calls:
            stream.chunk(tokens, last)
        stream.set_arm(Arm.EAGER)
        stream.set_arm(Arm.S)  # a switch into the state rule retains into the carry
        stream.reset()
    return rec.ops


def test_audit_off_runs_exactly_the_ops_of_a_stream_without_an_auditor(flow: Any) -> None:
    voice = random_voice(prompt_tokens=12, seed=9)
    stream = make_stream(flow, voice, Arm.S, ReplayEngine("cpu", enabled=False))
    calls = token_calls([28, 28, 28, "last:5"], seed=10)
    bare = ops_of(stream, calls)
    stream.set_auditor(Auditor(enabled=False), declared(voice.frames))
    assert stream.auditor is None and ops_of(stream, calls) == bare
    auditor = Auditor(strict=True)
    stream.set_auditor(auditor, declared(voice.frames))
    on = ops_of(stream, calls)
    assert len(on) > len(bare) and on.count("aten.clone.default") > bare.count(
        "aten.clone.default"
    ), "the recorder must see the shadow path's copies"
    assert auditor.report().ok and auditor.report().retentions == len(calls) + 1
    stream.set_auditor(None)
    assert ops_of(stream, calls) == bare

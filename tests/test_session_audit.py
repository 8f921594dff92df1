"""Settings.audit in a session: the trace header, every period's audit counts, no change of a
single sample, and a divergence reported as an event of its period instead of a crash.

A scripted backbone (two turns, fixed tokens) drives the small model on the CPU, so the calls
and their retentions are known in advance and no voice-activity model runs.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from app.session import Session, build_session
from app.settings import Settings
from engine.arms import Arm
from engine.contract import Order
from engine.duplex import Phase
from engine.trace import read_trace
from engine.windowed import BackboneStep

pytestmark = pytest.mark.usefixtures("one_thread")

# Per period: (tokens emitted, turn ends). Turn one reaches the retention bound (flush + steady
# windows), turn two is cut short; silence between them.
SCRIPT = [(0, False), (28, False), (25, False), (25, False), (25, False), (7, True), (0, False)]
SCRIPT += [(28, False), (25, False), (4, True), (0, False)]
# The arm each period asks for (None: keep): S-family, then stock arms, then back.
ARMS: dict[int, Arm] = {3: Arm.S, 4: Arm.R, 6: Arm.EAGER, 8: Arm.SR}


class ScriptedBackbone:
    """Speaks the script's tokens (seeded) whatever it hears."""

    period_s, input_rate = 1.0, 16_000

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.reset()

    def reset(self) -> None:
        self.k, self.gen = 0, torch.Generator().manual_seed(self.seed)

    def step(self, mic: np.ndarray) -> BackboneStep:
        n, end = SCRIPT[self.k % len(SCRIPT)]
        self.k += 1
        tokens = torch.randint(0, 6561, (1, n), generator=self.gen, dtype=torch.int32)
        phase = Phase.SPEAK if n or end else Phase.LISTEN
        return BackboneStep(phase, tokens, end, False, 0.0)


def session(audit: bool, trace: Path | None = None, arm: Arm = Arm.SRC) -> Session:
    settings = Settings(
        family="synthetic", device="cpu", model_size="small", arm=arm, audit=audit, voice_frames=40
    )
    session = build_session(settings, trace=trace, n_steps=2)
    session.loop.model.backbone = ScriptedBackbone()  # type: ignore[attr-defined]
    return session


def converse(s: Session) -> list[Any]:
    silence = np.zeros(16_000, np.float32)
    outcomes = []
    for k in range(len(SCRIPT)):
        if k in ARMS:
            s.request_arm(ARMS[k])
        outcomes.append(s.step(silence))
    s.close()
    return outcomes


def test_audit_counts_every_retention_and_changes_no_sample(tmp_path: Path) -> None:
    s_off = session(False, tmp_path / "off.jsonl")
    # Off: nothing attached, the flow writes the bare carry (no shadow op, no allocation).
    assert s_off.audit is None and s_off.loop.model.synthesizer.flow.auditor is None  # type: ignore[attr-defined]
    off = converse(s_off)
    s = session(True, tmp_path / "on.jsonl")
    carry = s.loop.model.synthesizer.flow.carry  # type: ignore[attr-defined]
    before = carry.retentions
    on = converse(s)
    for a, b in zip(off, on, strict=True):
        assert np.array_equal(a.pcm, b.pcm) and a.record.arm == b.record.arm
    assert any(np.abs(o.pcm).max() > 0 for o in on), "the script must speak"
    assert all("audit" not in o.record.loop for o in off)
    facts = [o.record.loop["audit"] for o in on]
    for o, f in zip(on, facts, strict=True):
        assert f["active"] == Arm(o.record.arm).state_rule
        assert f["divergences"] == 0 and f["agreements"] == f["retentions"]
        assert ("inactive" in f) != f["active"]
        if not f["active"]:
            assert f["retentions"] == 0 and "no carry retention" in f["inactive"]
    # Every retention the carry made in the conversation was audited, one address throughout.
    assert sum(f["retentions"] for f in facts) == carry.retentions - before > 0
    assert facts[-1]["retentions_total"] == carry.retentions - before
    assert facts[-1]["addresses"] == 1 and facts[-1]["first_divergence"] is None
    assert sum(f["resets"] for f in facts) == 2  # the two turns' ends
    # The trace: header and records carry the audit state.
    h_off, r_off = read_trace(tmp_path / "off.jsonl")
    h_on, r_on = read_trace(tmp_path / "on.jsonl")
    assert h_off["settings"]["audit_active"] is False and "audit_scope" not in h_off["settings"]
    assert h_on["settings"]["audit_active"] is True
    scope = h_on["settings"]["audit_scope"]
    assert scope["region"] == "estimator_att" and scope["arms"] == ["S", "SR", "SRc"]
    assert scope["declared"] == {"dim": 4, "prompt": 100, "history": 40, "order": "newest_first"}
    warm = h_on["settings"]["warmup"]["audit"]
    assert warm["retentions_total"] > 0 and warm["divergences_total"] == 0
    assert [r["loop"]["audit"] for r in r_on] == facts
    assert len(r_off) == len(r_on) == len(SCRIPT)


def test_a_divergence_is_an_event_of_its_period_not_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A carry made to retain append-ordered (its order flag flipped after the build, as in the
    paper's development bug) under the newest_first declaration: the conversation runs on, and
    the period of the first wrong retention holds the event, localized."""
    s = session(True, tmp_path / "bad.jsonl", arm=Arm.S)
    carry = s.loop.model.synthesizer.flow.carry  # type: ignore[attr-defined]
    carry.retention = dataclasses.replace(carry.retention, order=Order.OLDEST_FIRST)
    with caplog.at_level(logging.WARNING, logger="duplexcadence.audit"):
        outcomes = converse(s)
    events = [
        (k, e) for k, o in enumerate(outcomes) for e in o.record.events
        if e["kind"] == "audit_divergence"
    ]  # fmt: skip
    assert len(events) == 1, "one event: the region's first divergence"
    k, event = events[0]
    # Flush, steady, steady: the third retention (call 2) is the first to evict, in period 3.
    assert k == 3 and event["op"] == "estimator_att"
    assert "retention call 2" in event["detail"] and "[40, 140)" in event["detail"]
    facts = outcomes[k].record.loop["audit"]
    assert facts["divergences"] == 1 and facts["first_divergence"]["call"] == 2
    assert facts["first_divergence"]["slice"] == [40, 140]
    assert outcomes[-1].record.loop["audit"]["divergences_total"] >= 1
    assert [r.message for r in caplog.records].count(f"audit: {event['detail']}") == 1
    _, records = read_trace(tmp_path / "bad.jsonl")
    assert [e["kind"] for e in records[k]["events"]].count("audit_divergence") == 1
    assert records[k]["loop"]["audit"] == facts
    assert len(records) == len(SCRIPT)

"""build_session: progress while loading and capturing, what the GUI reads, early errors, and the
Lychee-FD family's 13-token windows through the same loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from adapters.token2wav.presets import MODEL_SIZES, preset
from app.session import build_session, replace_settings
from app.settings import Settings, SettingsError
from engine.arms import Arm
from engine.trace import TraceError, read_trace
from tests.speech import conversation

pytestmark = pytest.mark.usefixtures("one_thread")


def test_progress_reports_loading_then_capture(tmp_path: Path) -> None:
    seen: list[tuple[str, float]] = []
    trace = tmp_path / "s.jsonl"
    session = build_session(
        Settings(family="synthetic", device="cpu"),
        trace=trace,
        progress=lambda s, f: seen.append((s, f)),
        n_steps=2,
    )
    stages = [s for s, _ in seen]
    assert stages[0] == "loading" and stages[-1] == "capture"
    assert stages.index("capture") > max(i for i, s in enumerate(stages) if s == "loading")
    for stage in ("loading", "capture"):
        fractions = [f for s, f in seen if s == stage]
        assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    assert (session.period_s, session.input_rate, session.output_rate) == (1.0, 16_000, 24_000)
    assert session.weights_synthetic and session.device == "cpu" and session.arm is Arm.SRC
    assert "small" in session.model_name and "seeded random" in session.model_name
    assert session.warmup["calls"] > 0 and session.trace_path == trace
    session.close()
    session.close()  # idempotent
    header, records = read_trace(trace)
    assert records == [] and header["settings"]["weights"].startswith("seeded random")
    assert header["settings"]["warmup"]["arm"] == "SRc"


def test_errors_come_before_loading(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="does not exist"):
        build_session(Settings(family="synthetic", checkpoint=tmp_path / "nope", model_size="full"))
    with pytest.raises(TraceError, match=r"\.jsonl"):
        build_session(Settings(family="synthetic", device="cpu"), trace=tmp_path / "t.json")
    with pytest.raises(SettingsError, match="envelope"):
        build_session(Settings(family="synthetic", device="cpu", arm=Arm.R), envelope=False)


def test_lean_session_refuses_stock_arms_with_the_fix() -> None:
    session = build_session(
        Settings(family="synthetic", device="cpu", arm=Arm.SR), n_steps=2, envelope=False
    )
    assert session.switchable_arms == (Arm.S, Arm.SR, Arm.SRC)  # what the window offers
    session.request_arm(Arm.EAGER)
    with pytest.raises(ValueError, match="envelope"):
        session.step(np.zeros(16_000, np.float32))
    session.close()


def test_a_model_that_warms_at_a_switch_keeps_the_session_from_reopening_capture(
    tmp_path: Path,
) -> None:
    """A switch into an arm the load did not warm re-opens capture (logged ``unseal``) unless
    the model captures that arm's catalog itself at the switch (MiniCPM-o's period model)."""
    import dataclasses

    from app.session import Session

    for warms, unseals in ((False, 1), (True, 0)):
        trace = tmp_path / f"s{warms}.jsonl"
        session = build_session(Settings(family="synthetic", device="cpu"), trace=trace, n_steps=2)
        loaded = dataclasses.replace(session.loaded, warms_at_switch=warms)
        session = Session(session.loop, loaded, session.settings, device="cpu", trace=session.trace)
        session.request_arm(Arm.SR)
        session.step(np.zeros(16_000, np.float32))
        session.close()
        _, records = read_trace(trace)
        assert sum(e["kind"] == "unseal" for r in records for e in r["events"]) == unseals


def test_lychee_windows_run_the_loop_exactly() -> None:
    talk = conversation([0.3, "hello there, how are you doing today", 9.0]).periods()
    runs = {}
    for arm in (Arm.EAGER, Arm.SRC):
        session = build_session(Settings(device="cpu", family="lycheefd", arm=arm), n_steps=2)
        runs[arm] = [session.step(mic) for mic in talk]
        session.close()
    calls = [c for o in runs[Arm.EAGER] for c in o.calls]
    assert calls[0].kind == "flush" and calls[-1].kind == "last"
    assert {c.tokens for c in calls if c.kind == "steady"} == {13}
    assert all(c.tokens <= 13 for c in calls)
    for a, b in zip(runs[Arm.EAGER], runs[Arm.SRC], strict=True):
        assert np.array_equal(a.pcm, b.pcm)
    hits = sum(o.record.replay["total"]["hits"] for o in runs[Arm.SRC])
    assert hits > 0


def test_presets_and_settings_helpers() -> None:
    assert set(MODEL_SIZES) == {"full", "small"} and preset("small").n_steps == 10
    with pytest.raises(ValueError, match="full, small"):
        preset("tiny")
    changed = replace_settings(Settings(), arm=Arm.R, checkpoint=Path("/x"))
    assert changed.arm is Arm.R and changed.checkpoint == Path("/x")

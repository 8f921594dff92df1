"""ExactShapeReplay on CUDA: real graphs, bit-exact against eager (the issue's "Done when").

Every call is classified by counting real ``CUDAGraph.replay`` launches (patched), static outputs
are poisoned with NaN before each replay, and every output is compared with ``torch.equal``.
Key numbers go to ``$DUPLEXCADENCE_GPU_RESULTS`` (one JSON line per test) when it is set.
Run with ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` set before CUDA initialises (the runner does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from engine.replay import ReplayEngine, ReplayOp
from engine.signature import Catalog
from tests.gpu_results import record
from tests.toy import ToyAttention, ToyConfig, compare_stream, prime, stream_plan

pytestmark = pytest.mark.gpu

GPU_TOY = ToyConfig(batch=2, dim=64, prompt=30, history=40, chunk=10, flush=4, seed=3)


def xs(n: int, seed: int, shape: tuple[int, ...] = (4, 256)) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).cuda() for _ in range(n)]


def noisy(x: Tensor) -> tuple[Tensor, Tensor]:
    """Draws from the device generator twice per call (like HiFT's SineGen)."""
    return x * 2 + torch.randn_like(x), torch.rand(7, device=x.device)


def run_seeded(
    fn: Callable[[Tensor], tuple[Tensor, Tensor]], inputs: list[Tensor], seed: int
) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
    torch.cuda.manual_seed(seed)
    outs = [fn(x) for x in inputs]
    torch.cuda.synchronize()
    return outs, torch.cuda.get_rng_state()


def count_equal(a: list[tuple[Tensor, Tensor]], b: list[tuple[Tensor, Tensor]]) -> int:
    return sum(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )


def totals(engine: ReplayEngine) -> dict[str, object]:
    total = engine.snapshot()["total"]
    return {k: total[k] for k in ("hits", "captures", "capture_s", "capture_bytes")}


@pytest.mark.parametrize("copy_out", [True, False])
def test_toy_stream_replays_every_call_bit_exact(copy_out: bool, replays: list[int]) -> None:
    toy = ToyAttention(GPU_TOY, "cuda")
    carry = toy.carry()
    engine = ReplayEngine("cuda", strict=True, poison=True)
    op = engine.register(
        "toy", toy.step, catalog=toy.catalog(carry), aliased=["cache"], copy_out=copy_out
    )
    with torch.no_grad():
        prime(toy, op, carry)
        assert op.uncaptured() == [], "priming must capture the whole catalog"
        engine.seal()
        warm = totals(engine)
        engine.reset_counters()
        launched = replays[0]
        plan = stream_plan(GPU_TOY, 500, seed=1)
        report = compare_stream(toy, op, carry, plan, seed=2, decision=lambda: op.last_decision)
    real = replays[0] - launched
    record(
        f"toy_stream[copy_out={copy_out}]",
        calls=report.calls,
        hits=real,
        exact=report.exact,
        classes=len(op.catalog),
        **{k: warm[k] for k in ("captures", "capture_s", "capture_bytes")},
    )
    assert report.calls == 500 and real == 500 and report.exact == 500
    assert set(report.decisions) == {"replay"}
    assert engine.snapshot()["total"]["misses"] == {}


def test_pointer_drift_invalidates_and_stays_exact(replays: list[int]) -> None:
    toy = ToyAttention(GPU_TOY, "cuda")
    engine = ReplayEngine("cuda", poison=True)
    carry = toy.carry()
    op = engine.register("toy", toy.step, catalog=toy.catalog(carry), aliased=["cache"])
    with torch.no_grad():
        prime(toy, op, carry)
        engine.drain_events()
        moved = toy.carry()  # a new buffer: every class's aliased address drifts
        assert moved.data_ptr() != carry.data_ptr()
        plan = stream_plan(GPU_TOY, 120, seed=5)
        report = compare_stream(toy, op, moved, plan, seed=6, decision=lambda: op.last_decision)
    kinds = [e.kind for e in engine.drain_events()]
    record(
        "pointer_drift",
        calls=report.calls,
        exact=report.exact,
        invalidations=kinds.count("invalidation"),
        **totals(engine),
    )
    assert report.exact == report.calls == 120
    assert "eager:drift" in report.decisions and kinds.count("invalidation") >= 1
    first_drift = report.decisions.index("eager:drift")
    assert "replay" in report.decisions[first_drift:], "classes re-capture at the new address"


def test_device_randomness_replays_what_eager_draws(replays: list[int]) -> None:
    inputs = xs(100, seed=7)
    eager, eager_state = run_seeded(noisy, inputs, seed=1234)
    engine = ReplayEngine("cuda", poison=True)
    op = engine.register("noisy", noisy, catalog=Catalog.any())
    decisions: list[str] = []

    def call(x: Tensor) -> tuple[Tensor, Tensor]:
        out: tuple[Tensor, Tensor] = op(x)
        decisions.append(op.last_decision)
        return out

    with torch.no_grad():
        replayed, replay_state = run_seeded(call, inputs, seed=1234)
    exact = sum(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(eager, replayed, strict=True)
    )
    record("device_random", calls=100, exact=exact, **totals(engine))
    assert decisions[:2] == ["eager:warmup", "capture"] and set(decisions[2:]) == {"replay"}
    assert exact == 100
    assert torch.equal(eager_state, replay_state), "the generator ends where eager leaves it"
    (capture,) = [e for e in engine.drain_events() if e.kind == "capture"]
    assert capture.reason == "random", "device randomness is admitted and flagged"


def test_host_randomness_is_rejected_on_device(replays: list[int]) -> None:
    engine = ReplayEngine("cuda")
    op = engine.register("host", lambda x: x + torch.randn(x.shape).cuda(), catalog=Catalog.any())
    for x in xs(5, seed=8):
        op(x)
    assert op.last_decision == "eager:host_randomness" and replays[0] == 0
    assert op.counters.rejections == 1 and op.counters.captures == 0
    record("host_random", calls=5, hits=0, rejections=1)


def injected_oom(x: Tensor) -> Tensor:
    y = torch.randn_like(x)  # the generator is mid-capture when the OOM strikes
    if torch.cuda.is_current_stream_capturing():
        raise torch.cuda.OutOfMemoryError("injected capture OOM")
    return x + y


def host_sync(x: Tensor) -> Tensor:
    y = torch.randn_like(x)
    return x + y * y.sum().item()  # a host sync invalidates the capture itself


def check_generator_recovers(engine: ReplayEngine, seed: int) -> int:
    """After a failed capture, a device-random operator still captures and replays exactly."""
    inputs = xs(20, seed=seed)
    eager, eager_state = run_seeded(noisy, inputs, seed=seed)
    op: ReplayOp = engine.register(f"noisy{seed}", noisy, catalog=Catalog.any())
    with torch.no_grad():
        replayed, state = run_seeded(op, inputs, seed=seed)
    assert op.last_decision == "replay" and op.counters.hits == 18
    exact = sum(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(eager, replayed, strict=True)
    )
    assert exact == 20 and torch.equal(state, eager_state)
    return exact


@pytest.mark.parametrize("fn", [injected_oom, host_sync], ids=["oom", "host_sync"])
def test_failed_capture_falls_back_and_the_generator_recovers(
    fn: Callable[[Tensor], Tensor], caplog: pytest.LogCaptureFixture, replays: list[int]
) -> None:
    inputs = xs(6, seed=9)
    eager = run_seeded(lambda x: (fn(x), x), inputs, seed=99)[0] if fn is injected_oom else None
    engine = ReplayEngine("cuda")
    op = engine.register("failing", fn, catalog=Catalog.any())
    with caplog.at_level(logging.WARNING, logger="duplexcadence.replay"), torch.no_grad():
        torch.cuda.manual_seed(99)
        outs = [op(x) for x in inputs]
    assert op.last_decision == "eager:fallback" and op.counters.fallbacks == 1
    (event,) = [e for e in engine.drain_events() if e.kind == "fallback"]
    if fn is injected_oom:
        assert event.reason == "OutOfMemoryError: injected capture OOM"
        assert eager is not None and all(
            torch.equal(a[0], b) for a, b in zip(eager, outs, strict=True)
        )
    assert any("fallback failing" in r.getMessage() for r in caplog.records), "logged"
    assert engine.snapshot()["sealed"] is False
    exact = check_generator_recovers(engine, seed=11)
    record(f"capture_failure[{fn.__name__}]", reason=event.reason, recovered_exact=exact)


def test_a_graph_collected_during_a_later_capture_does_not_break_it() -> None:
    """An older engine's graphs, held only in a reference cycle, are not freed inside a later
    capture (destroying a graph while the stream captures fails it): the collector is off while
    capturing (engine/capture.py), even with a collection due at every allocation."""
    import gc

    def doubled(x: Tensor) -> Tensor:
        [[i] for i in range(100)]  # Python allocations: with threshold 1, a collection is due
        return x * 2 + 1

    inputs = xs(4, seed=11)
    old = ReplayEngine("cuda")
    old_op = old.register("old", doubled, catalog=Catalog.any())
    with torch.no_grad():
        for x in inputs[:3]:
            old_op(x)
    assert old.snapshot()["total"]["captures"] == 1
    cycle: list[object] = [old, old_op]
    cycle.append(cycle)
    del old, old_op, cycle  # only the collector can free the old graph now
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        engine = ReplayEngine("cuda")
        op = engine.register("new", doubled, catalog=Catalog.any())
        with torch.no_grad():
            outs = [op(x) for x in inputs]
    finally:
        gc.set_threshold(*threshold)
    total = engine.snapshot()["total"]
    assert total["captures"] == 1 and total["fallbacks"] == 0, total
    assert all(torch.equal(o, x * 2 + 1) for o, x in zip(outs, inputs, strict=True))

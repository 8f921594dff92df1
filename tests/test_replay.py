"""ExactShapeReplay on the CPU: every admission decision, simulated replay (no CUDA here).

Without CUDA the engine runs ``fn`` eagerly on its staged static inputs where a GPU would
replay, so signatures, catalogs, staging, aliasing, drift, effect probing, the kill switch and
the seal latch are all exercised here; ``tests/gpu/test_replay_gpu.py`` checks real graphs.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from torch import Tensor

from engine.replay import ENV_KILL_SWITCH, ReplayEngine, ReplayError, ReplayEvent
from engine.replay_parts import Binding, poison_targets
from engine.signature import Catalog, Signature, TensorSpec, Unkeyable
from tests.toy import ToyAttention, ToyConfig, compare_stream, prime, stream_plan

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_thread")


def rand(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def affine(x: Tensor, scale: float = 2.0) -> Tensor:
    return x * scale + 1


def catalog_for(*calls: tuple[object, ...]) -> Catalog:
    return Catalog(Signature.of(call) for call in calls)


# -- signatures ---------------------------------------------------------------------------


def test_signature_keys_every_kernel_changing_property() -> None:
    x = rand(2, 3)
    base = Signature.of((x, 2.0))
    assert Signature.of((rand(2, 3, seed=1), 2.0)) == base, "values are not in the key"
    assert Signature.of((rand(3, 2), 2.0)) != base, "shape"
    assert Signature.of((rand(3, 2).t(), 2.0)) != base, "stride"
    assert Signature.of((x.double(), 2.0)) != base, "dtype"
    assert Signature.of((x, 3.0)) != base, "scalar value"
    assert Signature.of((x, 2)) != base, "int vs float"
    assert len({Signature.of((v,)) for v in (True, 1, 1.0)}) == 3, "bool/int/float apart"
    assert Signature.of(([1, 2],)) != Signature.of(((1, 2),)), "list vs tuple"
    assert Signature.of((float("nan"),)) == Signature.of((float("nan"),)), "nan keys by bits"
    assert Signature.of((0.0,)) != Signature.of((-0.0,))
    assert Signature.of((x,), {"s": 2.0}) != base, "keyword vs positional"
    assert Signature.of((x, 2.0), extra="math").without_extra() == base
    nested = Signature.of(([x, (None, "a", torch.float16)],))
    assert hash(nested) == hash(Signature.of(([x, (None, "a", torch.float16)],)))


def test_tensor_spec_keys_like_a_tensor() -> None:
    x = rand(2, 5)[:, 1:4]  # a strided view
    assert Signature.of((TensorSpec.like(x),)) == Signature.of((x,))
    assert Signature.of((TensorSpec((2, 3), torch.float32, "cpu"),)) == Signature.of((rand(2, 3),))
    meta = torch.empty(2, 3, device="meta")
    assert Signature.of((TensorSpec.like(meta, device="cpu"),)) == Signature.of((rand(2, 3),))
    with pytest.raises(ValueError, match="one stride per dimension"):
        TensorSpec((2, 3), torch.float32, "cpu", stride=(1,))


def test_unkeyable_argument_runs_eager() -> None:
    with pytest.raises(Unkeyable, match="object"):
        Signature.of((object(),))
    engine = ReplayEngine(CPU)
    op = engine.register("f", lambda x, cfg: x + 1, catalog=Catalog.any())
    out = op(rand(3), {"not": "keyable"})
    assert torch.equal(out, rand(3) + 1)
    assert op.last_decision == "eager:unkeyable"
    assert op.counters.misses == {"unkeyable": 1}


# -- admission ------------------------------------------------------------------------------


def test_catalog_fails_closed() -> None:
    engine = ReplayEngine(CPU)
    op = engine.register("f", affine, catalog=catalog_for((TensorSpec((4,), torch.float32, CPU),)))
    for _ in range(3):
        assert torch.equal(op(rand(5)), affine(rand(5)))
        assert op.last_decision == "eager:not_in_catalog"
    op(rand(4))
    assert op.last_decision == "eager:warmup"
    assert op.counters.misses == {"not_in_catalog": 3, "warmup": 1}
    with pytest.raises(TypeError, match=r"Catalog\.any\(\)"):
        engine.register("g", affine, catalog=None)  # type: ignore[arg-type]


def test_catalog_from_example_calls_and_foreign_devices() -> None:
    catalog = Catalog.of_calls([(TensorSpec((4,), torch.float32, CPU), 2.0)])
    assert Signature.of((rand(4), 2.0)) in catalog and len(catalog) == 1
    engine = ReplayEngine(CPU)
    op = engine.register("f", affine, catalog=Catalog.any())
    op(torch.empty(4, device="meta"))
    assert op.last_decision == "eager:foreign_device" and op.counters.rejections == 1


def test_open_catalog_is_explicit_and_counted() -> None:
    engine = ReplayEngine(CPU)
    op = engine.register("f", affine, catalog=Catalog.any())
    op(rand(4))
    op(rand(5))
    assert op.counters.open_admissions == 2


def test_warmup_capture_then_hits() -> None:
    engine = ReplayEngine(CPU, warmup_calls=2)
    op = engine.register("f", affine, catalog=catalog_for((rand(4), 3.0)))
    decisions = []
    for i in range(6):
        x = rand(4, seed=i)
        assert torch.equal(op(x, 3.0), affine(x, 3.0))
        decisions.append(op.last_decision)
    assert decisions == ["eager:warmup"] * 2 + ["capture"] + ["replay"] * 3
    c = op.counters
    assert (c.hits, c.captures, c.misses) == (3, 1, {"warmup": 2})
    assert [e.kind for e in engine.drain_events()] == ["capture"]
    assert op.uncaptured() == [] and len(op.captured()) == 1


def test_staged_inputs_are_copies_with_the_callers_strides() -> None:
    """A non-contiguous staged input keeps its strides, and every call sees its own values."""
    engine = ReplayEngine(CPU)
    seen: list[tuple[int, ...]] = []

    def fn(x: Tensor) -> Tensor:
        seen.append(tuple(x.stride()))
        return x.cumsum(0)

    op = engine.register("f", fn, catalog=Catalog.any())
    for i in range(5):
        x = rand(6, 4, seed=i).t()
        assert torch.equal(op(x), x.cumsum(0))
    assert set(seen) == {(1, 4)}
    assert op.counters.hits == 3


def test_outputs_are_copies_unless_copy_out_false() -> None:
    engine = ReplayEngine(CPU)
    op = engine.register("f", lambda x: (x, {"y": x * 2}), catalog=Catalog.any())
    x = rand(3)
    for _ in range(3):
        a, d = op(x)
    assert op.last_decision == "replay"
    assert a.data_ptr() != x.data_ptr(), "a pytree output leaf was handed out uncopied"
    assert torch.equal(d["y"], x * 2)
    raw = engine.register("g", lambda x: x, catalog=Catalog.any(), copy_out=False)
    for _ in range(3):
        out = raw(x)
    assert raw.last_decision == "replay" and out.data_ptr() != x.data_ptr(), "reads the stage"


def test_poison_targets_spare_outputs_that_alias_inputs() -> None:
    """Poisoning (GPU-only at run time) must never touch an output that views an input."""
    x, cache = rand(4), rand(3, seed=1)
    binding = Binding.stage((x, cache), {}, [x, cache], aliased=(1,), regions=())
    binding.outputs = (rand(2), torch.arange(3), binding.static_args[1][:2], torch.ones(2) > 0)
    targets = poison_targets(binding)
    assert targets[0][0] is binding.outputs[0] and targets[0][1] != targets[0][1], "NaN"
    assert targets[1] == (binding.outputs[1], float(torch.iinfo(torch.int64).max))
    assert len(targets) == 2, "the carry view and the bool output are spared"


def test_extra_key_folds_into_the_signature() -> None:
    backend = ["math"]
    engine = ReplayEngine(CPU)
    op = engine.register("f", affine, catalog=catalog_for((rand(4),)), extra_key=lambda: backend[0])
    for _ in range(3):
        op(rand(4))
    assert op.last_decision == "replay"
    backend[0] = "flash"
    op(rand(4))
    assert op.last_decision == "eager:warmup", "another backend is another class"
    engine2 = ReplayEngine(CPU)
    bad = engine2.register("f", affine, catalog=Catalog.any(), extra_key=lambda: [1])  # type: ignore[arg-type,return-value]
    bad(rand(4))
    assert bad.last_decision == "eager:unkeyable"


# -- address stability ----------------------------------------------------------------------


def test_aliased_drift_invalidates_then_rejects() -> None:
    engine = ReplayEngine(CPU, max_recaptures=2)
    op = engine.register("f", lambda x, cache: x @ cache, catalog=Catalog.any(), aliased=["cache"])
    x = rand(2, 3)
    cache = rand(3, 3, seed=1)
    for _ in range(3):
        op(x, cache)
    assert op.last_decision == "replay"
    kinds = []
    for _ in range(3):
        moved = cache.clone()  # same values and geometry, another address
        assert torch.equal(op(x, moved), x @ cache), "a drifted call must still be exact"
        kinds.append(op.last_decision)
        for _ in range(3):  # re-warm, re-capture at the new address, replay
            op(x, moved)
        cache = moved
        kinds.append(op.last_decision)
    drifted = ["eager:drift", "replay"] * 2 + ["eager:unstable_address"] * 2
    assert kinds == drifted
    events = [(e.kind, e.reason) for e in engine.drain_events()]
    assert events.count(("invalidation", "drift")) == 3
    assert ("rejection", "unstable_address") in events
    assert op.counters.invalidations == 3 and op.counters.rejections == 1


def test_aliased_by_position_or_name_is_the_same_slot() -> None:
    engine = ReplayEngine(CPU)
    op = engine.register("f", lambda x, cache: x + cache, catalog=Catalog.any(), aliased=[1])
    x, cache = rand(3), rand(3, seed=1)
    for _ in range(3):
        op(x, cache=cache)
    op(x, cache=cache.clone())
    assert op.last_decision == "eager:drift"


def test_write_through_region_drift() -> None:
    engine = ReplayEngine(CPU)
    state = {"buf": torch.zeros(4)}

    def fn(x: Tensor) -> Tensor:
        state["buf"].copy_(x)
        return x * 2

    op = engine.register("f", fn, catalog=Catalog.any(), write_through=lambda: [state["buf"]])
    for i in range(3):
        op(rand(4, seed=i))
    assert op.last_decision == "replay" and torch.equal(state["buf"], rand(4, seed=2))
    state["buf"] = torch.zeros(4)
    op(rand(4, seed=5))
    assert op.last_decision == "eager:drift"
    assert torch.equal(state["buf"], rand(4, seed=5))


# -- effects --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "draw",
    [
        lambda x: x + torch.randn(x.shape),
        lambda x: x + random.random(),
        lambda x: x + float(np.random.rand()),
    ],
    ids=["torch", "random", "numpy"],
)
def test_host_randomness_is_rejected_for_good(draw: object) -> None:
    engine = ReplayEngine(CPU)
    op = engine.register("noisy", draw, catalog=Catalog.any())  # type: ignore[arg-type]
    for _ in range(5):
        op(rand(3))
    assert op.last_decision == "eager:host_randomness"
    assert op.counters.misses == {"host_randomness": 5}
    assert op.counters.captures == 0 and op.captured() == []
    events = engine.drain_events()
    assert [(e.kind, e.reason) for e in events] == [("rejection", "host_randomness")]


# -- switches -------------------------------------------------------------------------------


def test_kill_switch_env_and_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KILL_SWITCH, "1")
    killed = ReplayEngine(CPU)
    monkeypatch.delenv(ENV_KILL_SWITCH)
    flagged = ReplayEngine(CPU, enabled=False)
    for engine in (killed, flagged):
        op = engine.register("f", affine, catalog=Catalog.any())
        for _ in range(4):
            assert torch.equal(op(rand(4)), affine(rand(4)))
        assert op.counters.misses == {"disabled": 4} and op.counters.hits == 0
        assert engine.snapshot()["enabled"] is False


def test_seal_latch() -> None:
    engine = ReplayEngine(CPU, strict=True)
    op = engine.register("f", affine, catalog=Catalog.any())
    for _ in range(2):
        op(rand(4))
    engine.seal()
    op(rand(4))
    assert op.last_decision == "replay", "captured classes keep replaying after seal"
    with pytest.raises(ReplayError, match="after seal"):
        op(rand(5))
    lenient = ReplayEngine(CPU)
    op2 = lenient.register("f", affine, catalog=Catalog.any())
    lenient.seal()
    assert torch.equal(op2(rand(5)), affine(rand(5)))
    assert op2.last_decision == "eager:sealed"
    lenient.unseal()
    op2(rand(5))
    assert op2.last_decision == "eager:warmup"


def test_capture_failure_falls_back_with_reason() -> None:
    """A staged input that overlaps itself cannot be staged: the class falls back, logged."""
    engine = ReplayEngine(CPU)
    op = engine.register("f", lambda x: x * 2, catalog=Catalog.any())
    x = rand(1, 3).expand(4, 3)
    for _ in range(3):
        assert torch.equal(op(x), x * 2)
    assert op.last_decision == "eager:fallback" and op.counters.fallbacks == 1
    (event,) = [e for e in engine.drain_events() if e.kind == "fallback"]
    assert event.reason.startswith("RuntimeError: ")


# -- reporting ------------------------------------------------------------------------------


def test_snapshot_and_events_are_plain_json() -> None:
    engine = ReplayEngine(CPU)
    a = engine.register("a", affine, catalog=Catalog.any())
    b = engine.register("b", lambda x: x + torch.randn(x.shape), catalog=Catalog.any())
    for _ in range(3):
        a(rand(4))
        b(rand(4))
    snap = json.loads(json.dumps(engine.snapshot()))
    assert snap["ops"]["a"]["hits"] == 1 and snap["ops"]["a"]["classes"] == 1
    assert snap["total"]["misses"] == {"warmup": 1, "host_randomness": 3}
    assert snap["total"]["captures"] == 1 and snap["total"]["rejections"] == 1
    events = engine.drain_events()
    assert all(isinstance(e, ReplayEvent) for e in events)
    json.dumps([e.to_dict() for e in events])
    assert engine.drain_events() == []
    engine.reset_counters()
    assert engine.snapshot()["total"]["hits"] == 0
    a(rand(4))
    assert a.last_decision == "replay", "reset_counters keeps the graphs"


# -- the toy stream -------------------------------------------------------------------------


@pytest.mark.parametrize("copy_out", [True, False])
def test_toy_stream_500_calls_replays_and_equals_stock(copy_out: bool) -> None:
    """500 calls with turn resets: after priming every call replays, and every call's output
    and retained cache equal the stock (allocate-and-concatenate) path bit for bit."""
    cfg = ToyConfig()
    toy = ToyAttention(cfg, CPU)
    carry = toy.carry()
    engine = ReplayEngine(CPU, strict=True)
    op = engine.register(
        "toy", toy.step, catalog=toy.catalog(carry), aliased=["cache"], copy_out=copy_out
    )
    prime(toy, op, carry)
    assert op.uncaptured() == [], "priming must capture the whole catalog"
    engine.seal()
    engine.reset_counters()
    plan = stream_plan(cfg, 500, seed=1)
    assert plan.count(None) >= 20, "the stream must cross many turn resets"
    report = compare_stream(toy, op, carry, plan, seed=2, decision=lambda: op.last_decision)
    assert report.calls == 500 and report.exact == 500
    assert set(report.decisions) == {"replay"}
    snap = engine.snapshot()["total"]
    assert snap["hits"] == 500 and snap["misses"] == {} and snap["invalidations"] == 0

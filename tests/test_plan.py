"""The plan pins the paper's figures from the declarations alone: attended extents, bounds,
catalog widths (criterion 3.5), over-reservation and the memory price per arm. CPU only, pure
Python; the whole file runs in about a second (the 2,001-call backbone closure included)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.arms import Arm
from engine.contract import StreamEvent
from engine.declaration_io import list_declarations, load_declaration
from engine.extents import walk
from engine.plan import Plan, catalog_width, make_plan, plan_as_dict

FP32_FRAME_16_STEPS = 16 * 16 * 2 * 8 * 128 * 4  # bytes per frame of the stock estimator view


@pytest.fixture(scope="module")
def minicpmo() -> Plan:
    return make_plan(load_declaration("minicpmo45_token2wav"))


def test_minicpmo_estimator_extents_and_width(minicpmo: Plan) -> None:
    region = minicpmo.region("estimator_att")
    assert region.extents == (302, 352, 402)
    assert region.width == 3
    assert (region.reset, region.retained_bound, region.stride) == (302, 402, 50)
    estimator = minicpmo.operator("estimator")
    assert estimator.width == 3 and estimator.in_scope
    steady = {dict(s.extents)["estimator_att"] for s in estimator.grid_catalog}
    assert steady == {302, 352, 402}
    assert all(s.frames == 56 for s in estimator.grid_catalog)


def test_envelope_collapses_to_demand(minicpmo: Plan) -> None:
    region = minicpmo.region("estimator_att")
    assert region.envelope_shape == (16, 16, 2, 8, 1000, 128)
    assert region.demand_shape == (10, 16, 2, 8, 458, 128)  # 10 x (P + 100 + f_call)
    assert region.rho == pytest.approx((16 * 1000) / (10 * 458))
    fifty = make_plan(load_declaration("minicpmo45_token2wav"), {"f_call": 50})
    assert fifty.region("estimator_att").demand_shape == (10, 16, 2, 8, 452, 128)
    assert fifty.region("estimator_att").extents == (302, 352, 402)


def test_backbone_is_outside_the_lossless_scope(minicpmo: Plan) -> None:
    backbone = minicpmo.operator("backbone")
    assert backbone.width == 2001 and not backbone.in_scope
    assert minicpmo.region("backbone_kv").width == 2001
    assert all(op.in_scope for op in minicpmo.operators if op.name != "backbone")


@pytest.mark.parametrize(
    ("name", "operator", "width"),
    [
        ("moshi", "lm_step", 1),
        ("moshi", "depformer_step", 1),
        ("moshi", "mimi", 1),
        ("personaplex", "lm_step", 1),
        ("freezeomni", "decoder", 2),
        ("lycheefd_token2wav", "estimator", 6),  # (402 - 302) / 20 + 1
    ],
)
def test_catalog_widths_of_the_five_families(name: str, operator: str, width: int) -> None:
    plan = make_plan(load_declaration(name))
    assert plan.operator(operator).width == width
    assert plan.operator(operator).in_scope


def test_moshi_rings_never_change_shape() -> None:
    plan = make_plan(load_declaration("moshi"))
    assert [r.extents for r in plan.regions] == [(3000,), (8,), (250,)] + [(1,)] * 7
    assert all(r.rho == 1.0 for r in plan.regions)


def test_criterion_matches_enumeration_everywhere() -> None:
    """K = ⌈W/s⌉ + 1 from arithmetic equals the count of extents the grid closure reaches."""
    for name in list_declarations():
        for region in make_plan(load_declaration(name)).regions:
            assert region.width == len(region.extents), (name, region.name)
    assert catalog_width(100, 50) == 3 and catalog_width(10, 40) == 2
    assert catalog_width(0, 50) == 1 and catalog_width(2000, 1) == 2001


def test_flush_classes_stay_within_the_stride(minicpmo: Plan) -> None:
    for name in ("estimator", "conformer", "hift"):
        op = minicpmo.operator(name)
        assert 0 < len(op.flush_sizes) <= 50
        assert max(op.flush_sizes) <= 56


def test_walk_through_turns_flushes_and_resets() -> None:
    decl = load_declaration("minicpmo45_token2wav")
    env = decl.values()
    calls = [c for c in walk(decl, env) if c.operator == "estimator"]
    before = [c.before["estimator_att"] for c in calls]
    after = [c.after["estimator_att"] for c in calls]
    peak = [c.peak["estimator_att"] for c in calls]
    # turn 1: 5 steady, flush of 13 tokens (advances 20), last of 4 tokens (8); then reset
    assert before[:7] == [302, 352, 402, 402, 402, 402, 402]
    assert after[:7] == [352, 402, 402, 402, 402, 402, 402]
    assert peak[:3] == [358, 408, 458]
    assert (calls[5].kind, calls[5].frames, calls[5].advance) == ("flush", 26, 20)
    # turn 2 starts from the prompt again
    assert before[7:] == [302, 352, 402]
    assert calls[-1].kind == "last" and calls[-1].admitted


def test_admission_marks_oversized_calls() -> None:
    decl = load_declaration("minicpmo45_token2wav")
    env = decl.values()
    events = [StreamEvent(kind="last", values={"tokens": 28})]
    (call, *_) = [c for c in walk(decl, env, events) if c.operator == "estimator"]
    assert call.advance == 56 and not call.admitted


def test_memory_price_per_arm(minicpmo: Plan) -> None:
    price = {p.arm: p for p in minicpmo.prices}
    assert price["eager"].staging_bytes == 0 and price["S"].staging_bytes == 0
    assert price["SRc"].staging_bytes < (1 << 20)  # carries aliased: only the small vocoder caches
    assert price["S"].state_bytes == price["SRc"].state_bytes < price["eager"].state_bytes
    # replay without the state rule clones the stacked 16-step view per class: 302 + 352 + 402
    estimator = FP32_FRAME_16_STEPS * (302 + 352 + 402)
    conformer = 10 * 8 * 128 * 4 * (302 + 352 + 402)
    assert price["Rc"].staging_bytes >= estimator + conformer
    assert price["Rc"].total_bytes > price["eager"].total_bytes > price["SRc"].total_bytes
    assert minicpmo.price(Arm.RC) == price["Rc"]


def test_plan_is_json_data(minicpmo: Plan) -> None:
    data = json.loads(json.dumps(plan_as_dict(minicpmo, with_walk=True)))
    regions = {r["name"]: r for r in data["regions"]}
    assert regions["estimator_att"]["extents"] == [302, 352, 402]
    assert data["walk"] and "walk" not in plan_as_dict(minicpmo)


def test_plan_imports_no_torch() -> None:
    code = "import sys, engine.plan, engine.contract; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

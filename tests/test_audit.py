"""The shadow auditor: stock concatenation beside every carry retention (paper §3.6).

Sizes follow the paper's estimator geometry along the clock (P=302, 100 retained, 50-frame
calls) with tiny other dims, so each test runs in well under a second on CPU.
"""

from __future__ import annotations

import json

import pytest
import torch

from engine.audit import AuditedCarry, AuditError, Auditor, _localize, audited
from engine.carry import Carry, RetentionRule
from engine.contract import Order

P, HISTORY, CALL, CAPACITY = 302, 100, 50, 458


def make_carry(order: Order, seed: int = 0, device: str = "cpu") -> tuple[Carry, torch.Generator]:
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(2, P, 3, generator=gen).to(device)
    return Carry(base, dim=1, prompt=P, history=HISTORY, order=order, capacity=CAPACITY), gen


def test_append_ordered_carry_under_prepend_declaration_caught_where_eviction_reaches_prompt() -> (
    None
):
    """The paper's bug: an oldest_first carry behind a newest_first declaration.

    Extents run 302 -> 352 -> 402 -> 452: the first two calls keep the cache whole and agree;
    the third is the first whose extent exceeds prompt + history, where the carry keeps the
    wrong runs. The first 100 frames (the newest, kept by both) still agree; the divergence
    starts at frame 100, in the declared prompt tail, taken from frames [150, 452) of H.
    """
    carry, gen = make_carry(Order.OLDEST_FIRST)
    auditor = Auditor()
    auditor.declare("estimator_att", RetentionRule(1, P, HISTORY, Order.NEWEST_FIRST))
    cache = carry.view().clone()
    for call in range(5):
        h = torch.cat([torch.randn(2, CALL, 3, generator=gen), cache], dim=1)  # prepend
        cache = auditor.retain("estimator_att", carry, h).clone()
        report = auditor.report()
        if call < 2:
            assert report.ok and report.agreements == call + 1, f"call {call} must agree"
    div = report.first_divergence
    assert div is not None, "the auditor missed the wrong retention order"
    assert (div.region, div.call, div.dim) == ("estimator_att", 2, 1)
    assert (div.part, div.slice, div.source) == ("prompt", (100, 402), (150, 452))
    assert div.index == (0, 100, 0)
    assert (div.expected_extent, div.actual_extent) == (402, 402)
    region = report.regions["estimator_att"]
    assert (region.retentions, region.agreements, region.evictions) == (5, 2, 3)


@pytest.mark.parametrize("order", list(Order))
def test_one_address_per_region_over_a_stream_with_resets(order: Order) -> None:
    """Two regions, all three write paths, turn resets: every retention agrees at one address."""
    carry_a, gen = make_carry(order, seed=1)
    carry_b, _ = make_carry(Order.OLDEST_FIRST, seed=2)
    auditor = Auditor(strict=True)
    a, b = audited(carry_a, "a", auditor), audited(carry_b, "b", auditor)
    for _turn in range(3):
        for _ in range(4):
            new = torch.randn(2, CALL, 3, generator=gen)
            a.append(new)
            b.reserve(CALL).copy_(new)
            b.commit(CALL)
        a.retain(torch.cat([torch.randn(2, 20, 3, generator=gen), a.view()], dim=1))
        if order is Order.OLDEST_FIRST:
            a.retain(torch.cat([a.view(), torch.randn(2, 20, 3, generator=gen)], dim=1))
        a.reset()
        b.reset()
    report = auditor.report()
    assert report.ok
    for name in ("a", "b"):
        region = report.regions[name]
        assert region.distinct_addresses == 1, f"region {name} moved"
        assert region.agreements == region.retentions and region.resets == 3


def wrong_order_stream(auditor: Auditor, calls: int, device: str = "cpu") -> None:
    """The operator prepends (as declared); the carry retains as if it appended."""
    carry, gen = make_carry(Order.OLDEST_FIRST, device=device)
    auditor.declare("x", RetentionRule(1, P, HISTORY, Order.NEWEST_FIRST))
    for _ in range(calls):
        new = torch.randn(2, CALL, 3, generator=gen).to(device)
        auditor.retain("x", carry, torch.cat([new, carry.view()], dim=1))


def test_report_serializes_to_plain_json() -> None:
    auditor = Auditor()
    wrong_order_stream(auditor, 3)
    data = json.loads(json.dumps(auditor.report().to_dict()))
    assert data["retentions"] == 3 and data["agreements"] == 2
    assert data["first_divergence"]["slice"] == [100, 402]
    assert data["regions"]["x"]["distinct_addresses"] == 1


def test_strict_auditor_raises_at_first_divergence() -> None:
    with pytest.raises(AuditError, match="call=2"):
        wrong_order_stream(Auditor(strict=True), 3)


def test_wrong_append_end_diverges_at_once() -> None:
    """Through append() the carry also picks the end new frames go to: wrong from call 0."""
    carry, gen = make_carry(Order.OLDEST_FIRST)
    auditor = Auditor()
    auditor.declare("x", RetentionRule(1, P, HISTORY, Order.NEWEST_FIRST))
    auditor.append("x", carry, torch.randn(2, CALL, 3, generator=gen))
    div = auditor.report().first_divergence
    assert div is not None and (div.call, div.part, div.slice) == (0, "whole", (0, 352))


def test_extent_mismatch_is_localized() -> None:
    """Agreeing frames but a different extent: the divergence is the extra run."""
    declared = RetentionRule(1, 6, 4, Order.OLDEST_FIRST)
    h = torch.randn(2, 10, 3)
    div = _localize("x", 7, declared, 10, h, h[:, :8])
    assert div is not None and div.part == "extent"
    assert (div.call, div.slice, div.expected_extent, div.actual_extent) == (7, (8, 10), 10, 8)


def test_comparison_is_bitwise() -> None:
    """NaN agrees with the same NaN; -0.0 does not agree with 0.0 (the carry copies bits)."""
    declared = RetentionRule(1, 3, 1, Order.OLDEST_FIRST)
    h = torch.tensor([[float("nan"), -0.0, 1.0]])
    assert _localize("x", 0, declared, 3, h, h.clone()) is None
    div = _localize("x", 0, declared, 3, h, torch.tensor([[float("nan"), 0.0, 1.0]]))
    assert div is not None and (div.index, div.part, div.slice) == ((0, 1), "whole", (0, 3))


def test_off_costs_nothing() -> None:
    """Disabled: ``audited`` returns the bare carry and the auditor only delegates."""
    carry, gen = make_carry(Order.NEWEST_FIRST)
    off = Auditor(enabled=False)
    assert audited(carry, "x", off) is carry and audited(carry, "x", None) is carry
    assert isinstance(audited(carry, "x", Auditor()), AuditedCarry)
    off.append("x", carry, torch.randn(2, CALL, 3, generator=gen))
    off.reset("x", carry)
    assert off.report().regions == {} and carry.retentions == 1 and carry.resets == 1


@pytest.mark.gpu
def test_auditor_localizes_on_cuda() -> None:
    """The same localization with the carry and the shadow path on the device."""
    auditor = Auditor()
    wrong_order_stream(auditor, 4, device="cuda")
    div = auditor.report().first_divergence
    assert div is not None and (div.call, div.slice, div.index) == (2, (100, 402), (0, 100, 0))

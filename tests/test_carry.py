"""The carry equals the stock ``torch.cat`` retention at every call, at one address (eq. 3).

Property tests draw prompt, history, call and flush sizes, both orders, the clock dim's position,
dtypes and streams with turn resets, and check every call against a reference that applies
:func:`stock_retention` to a fresh ``torch.cat``. CPU sizes are tiny (a few frames, two small
leading/trailing dims) so the file runs in seconds on 2 cores; the GPU tests use the paper's
geometry (P=302, 100 retained, 50-frame calls, capacity 458) at the estimator cache's shape.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from engine.carry import Carry, RetentionRule, retained_spans, stock_retention
from engine.contract import Order

DTYPES = (torch.float32, torch.bfloat16, torch.int32)


def rand(shape: list[int], dtype: torch.dtype, gen: torch.Generator, device: str = "cpu") -> Tensor:
    """Seeded random frames (never zeros, so a missed copy cannot pass)."""
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    return torch.randint(-(2**20), 2**20, shape, generator=gen, dtype=dtype).to(device)


def frames(shape: list[int], dim: int, n: int) -> list[int]:
    out = list(shape)
    out[dim] = n
    return out


def stock_cat(ref: Tensor, new: Tensor, dim: int, order: Order) -> Tensor:
    """The operator's post-call cache: new frames appended (oldest_first) or prepended."""
    pair = [ref, new] if order is Order.OLDEST_FIRST else [new, ref]
    return torch.cat(pair, dim=dim)


@st.composite
def streams(draw: st.DrawFn) -> dict[str, object]:
    order = draw(st.sampled_from(list(Order)))
    prompt, history = draw(st.integers(0, 8)), draw(st.integers(0, 8))
    base_extent = draw(st.integers(0, 12))
    ndim = draw(st.integers(1, 3))
    dim = draw(st.integers(0, ndim - 1))
    shape = [draw(st.integers(1, 3)) for _ in range(ndim)]
    slack = draw(st.integers(0, 12))
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.sampled_from(["retain", "append", "reserve"]), st.integers(0, 12)),
                st.just(("reset", 0)),
            ),
            min_size=1,
            max_size=30,
        )
    )
    return {
        "order": order,
        "prompt": prompt,
        "history": history,
        "dim": dim,
        "shape": frames(shape, dim, base_extent),
        "capacity": max(base_extent, prompt + history) + slack,
        "dtype": draw(st.sampled_from(DTYPES)),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "ops": ops,
    }


@settings(max_examples=400, deadline=None)
@given(streams())
def test_carry_equals_stock_retention_at_one_address(case: dict) -> None:  # type: ignore[type-arg]
    gen = torch.Generator().manual_seed(case["seed"])
    dim, order, dtype = case["dim"], case["order"], case["dtype"]
    base = rand(case["shape"], dtype, gen)
    pristine = base.clone()
    carry = Carry(
        base,
        dim=dim,
        prompt=case["prompt"],
        history=case["history"],
        order=order,
        capacity=case["capacity"],
    )
    buffer, ptr, ref = carry.buffer, carry.data_ptr(), base
    for op, n in case["ops"]:
        if op == "reset":
            ref = base
            carry.reset()
        else:
            new = rand(frames(case["shape"], dim, n), dtype, gen)
            ref = stock_retention(
                stock_cat(ref, new, dim, order), dim, case["prompt"], case["history"], order
            )
            room = carry.extent + n <= carry.capacity
            if op == "reserve" and order is Order.OLDEST_FIRST and room:
                carry.reserve(n).copy_(new)
                carry.commit(n)
            elif op == "retain":
                carry.retain(stock_cat(carry.view().clone(), new, dim, order))
            else:
                carry.append(new)
        assert torch.equal(carry.view(), ref), f"carry left the stock path after {op}({n})"
        assert carry.data_ptr() == ptr, "carry moved"
        assert carry.view().data_ptr() in (ptr, 0), "live frames must start at offset 0"
        assert carry.buffer is buffer, "carry reallocated its buffer"
    assert torch.equal(base, pristine), "the carry wrote its shared base state"


@pytest.mark.parametrize("order", list(Order))
def test_in_place_append_exhaustive_small_grid(order: Order) -> None:
    """Every (prompt, history, base, two call sizes) up to 5: covers each in-place move plan.

    Random streams reach the plans that need reordering (a move that would clobber another's
    source) only rarely; this grid reaches all of them.
    """
    gen = torch.Generator().manual_seed(5)
    for prompt, history, base_extent in itertools.product(range(5), range(5), range(6)):
        base = torch.randn(2, base_extent, generator=gen)
        for n1, n2 in itertools.product(range(6), range(6)):
            carry = Carry(base, dim=1, prompt=prompt, history=history, order=order, capacity=10)
            ref = base
            for n in (n1, n2):
                new = torch.randn(2, n, generator=gen)
                ref = stock_retention(stock_cat(ref, new, 1, order), 1, prompt, history, order)
                carry.append(new)
                assert torch.equal(carry.view(), ref), (prompt, history, base_extent, n1, n2)


@pytest.mark.parametrize("order", list(Order))
def test_paper_geometry_extents_and_counters(order: Order) -> None:
    """P=302, 100 retained, 50-frame calls: attended extents cycle {302, 352, 402} then lock."""
    gen = torch.Generator().manual_seed(7)
    base = rand([2, 302, 3], torch.float32, gen)
    carry = Carry(base, dim=1, prompt=302, history=100, order=order, capacity=458)
    extents = []
    for _ in range(6):
        extents.append(carry.extent)
        carry.append(rand([2, 50, 3], torch.float32, gen))
    assert extents == [302, 352, 402, 402, 402, 402]
    assert (carry.retentions, carry.evictions, carry.resets) == (6, 4, 0)
    carry.reset()
    assert carry.extent == 302 and carry.resets == 1
    assert torch.equal(carry.view(), base)


def test_vendor_trim_maps_onto_both_orders() -> None:
    """The vendor's ``cat([H[:P], H[-100:]])`` is oldest_first(P, 100) and newest_first(100, P)."""
    h = torch.randn(1, 2, 3, 4, 452, 5, generator=torch.Generator().manual_seed(3))
    vendor = torch.cat([h[:, :, :, :, :302], h[:, :, :, :, -100:]], dim=4)
    assert torch.equal(stock_retention(h, 4, 302, 100, Order.OLDEST_FIRST), vendor)
    assert torch.equal(stock_retention(h, 4, 100, 302, Order.NEWEST_FIRST), vendor)


def test_stock_retention_keeps_whole_cache_and_zero_counts() -> None:
    h = torch.randn(3, 10)
    assert stock_retention(h, 1, 6, 4, Order.OLDEST_FIRST) is h, "within bound: kept as is"
    # history=0 keeps no history (Python's h[:, -0:] would keep everything).
    assert torch.equal(stock_retention(h, 1, 4, 0, Order.OLDEST_FIRST), h[:, :4])
    assert stock_retention(h, -1, 0, 0, Order.NEWEST_FIRST).shape == (3, 0)
    assert retained_spans(12, 3, 2, Order.NEWEST_FIRST)[1].part == "prompt"
    assert RetentionRule(1, 2, 3, "newest_first").order is Order.NEWEST_FIRST  # type: ignore[arg-type]


def test_newest_first_steady_state_leaves_prompt_tail_in_place() -> None:
    """In steady state a prepend carry moves only the history window; the prompt tail stays."""
    carry = Carry(
        torch.randn(2, 8), dim=1, prompt=8, history=4, order=Order.NEWEST_FIRST, capacity=12
    )
    carry.append(torch.randn(2, 4))
    calls: list[tuple[int, int]] = []
    real = Carry._move

    def spy(self: Carry, dst: int, src: int, length: int) -> None:
        calls.append((dst, src))
        real(self, dst, src, length)

    Carry._move = spy  # type: ignore[method-assign]
    try:
        carry.append(torch.randn(2, 2))
    finally:
        Carry._move = real  # type: ignore[method-assign]
    assert calls == [(2, 0)], f"steady prepend should shift only the history window: {calls}"


def test_errors_name_the_fix() -> None:
    base = torch.randn(2, 5, 3)
    with pytest.raises(ValueError, match="plan's bound A"):
        Carry(base, dim=1, prompt=5, history=4, order=Order.OLDEST_FIRST, capacity=8)
    with pytest.raises(ValueError, match="out of range"):
        Carry(base, dim=3, prompt=5, history=4, order=Order.OLDEST_FIRST, capacity=9)
    carry = Carry(base, dim=-2, prompt=5, history=4, order=Order.OLDEST_FIRST, capacity=12)
    with pytest.raises(ValueError, match="only the clock dim may differ"):
        carry.append(torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="only the clock dim may differ"):
        carry.append(torch.randn(2, 5, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="shares the carry's storage"):
        carry.retain(carry.view())
    with pytest.raises(ValueError, match="exceed capacity"):
        carry.reserve(8)
    carry.reserve(3)
    with pytest.raises(ValueError, match="commit what you reserved"):
        carry.commit(2)
    newest = Carry(base, dim=1, prompt=5, history=4, order=Order.NEWEST_FIRST, capacity=9)
    with pytest.raises(ValueError, match="use append"):
        newest.reserve(1)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["append_newest", "append_oldest", "reserve_oldest"])
def test_cuda_graph_replays_steady_state_carry(path: str) -> None:
    """A captured steady-state carry write, replayed, equals eager stock retention every call.

    Steady state is a fixed point of the extent (402 -> 452 -> 402), so one graph serves every
    later call; the carry is allocated before capture and its address never changes.
    """
    order = Order.NEWEST_FIRST if path == "append_newest" else Order.OLDEST_FIRST
    gen, dev = torch.Generator().manual_seed(11), "cuda"
    shape = [10, 16, 2, 8, 302, 128]  # the estimator cache at the paper's operating point
    base = rand(shape, torch.float32, gen, dev)
    carry = Carry(base, dim=4, prompt=302, history=100, order=order, capacity=458)
    new = torch.empty(frames(shape, 4, 50), device=dev)

    def step() -> None:
        if path == "reserve_oldest":
            carry.reserve(50).copy_(new)
            carry.commit(50)
        else:
            carry.append(new)

    ref = base
    for _ in range(3):  # reach the steady extent (plain copies: no lazy library state to warm)
        new.copy_(rand(frames(shape, 4, 50), torch.float32, gen, dev))
        ref = stock_retention(stock_cat(ref, new, 4, order), 4, 302, 100, order)
        step()
    torch.cuda.synchronize()
    assert carry.extent == 402 and torch.equal(carry.view(), ref)
    ptr, graph = carry.data_ptr(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()  # recorded only: the buffer is untouched until replay
    assert carry.extent == 402 and torch.equal(carry.view(), ref), "capture must not write"
    for _ in range(4):
        new.copy_(rand(frames(shape, 4, 50), torch.float32, gen, dev))
        ref = stock_retention(stock_cat(ref, new, 4, order), 4, 302, 100, order)
        graph.replay()
        assert torch.equal(carry.view(), ref), "replayed carry left the stock path"
        assert carry.data_ptr() == ptr


@pytest.mark.parametrize("order", list(Order))
def test_settle_retains_what_the_operator_wrote_in_place(order: Order) -> None:
    """An operator that writes H = cat-in-order(new, cache) straight into the buffer, then
    ``settle``: the same values as the stock ``cat`` + retention, at the same address."""
    g = torch.Generator().manual_seed(4)
    base = torch.randn(3, 6, 2, generator=g)
    carry = Carry(base, dim=1, prompt=4, history=5, order=order, capacity=14)
    stock, ptr = base.clone(), carry.data_ptr()
    for n in (3, 3, 2, 4, 3):
        new = torch.randn(3, n, 2, generator=g)
        h = torch.cat([new, stock] if order is Order.NEWEST_FIRST else [stock, new], dim=1)
        stock = stock_retention(h, 1, 4, 5, order)
        carry.buffer.narrow(1, 0, h.shape[1]).copy_(h)  # the operator's write-through
        assert torch.equal(carry.settle(h.shape[1]), stock)
        assert carry.data_ptr() == ptr


def test_carries_sharing_one_base_reset_in_place_and_never_write_it() -> None:
    """Two carries (sessions) share one prompt-only base over a long stream with turn resets:
    every reset writes the base into the carry's own buffer, which never moves, and the shared
    base is read, never written."""
    gen = torch.Generator().manual_seed(1)
    P, history, call = 302, 100, 50
    base = torch.randn(2, 1, P, 4, generator=gen)
    pristine = base.clone()
    carries = [
        Carry(base, dim=2, prompt=P, history=history, order=order, capacity=458)
        for order in (Order.NEWEST_FIRST, Order.OLDEST_FIRST)
    ]
    ptrs = [c.data_ptr() for c in carries]
    for c in carries:
        assert c.base is base and c.data_ptr() != base.data_ptr(), "shared, never aliased"
    for _turn in range(6):
        for _ in range(5):
            for c in carries:
                c.append(torch.randn(2, 1, call, 4, generator=gen))
        for c, ptr in zip(carries, ptrs, strict=True):
            assert c.extent == P + history
            c.reset()
            assert c.data_ptr() == ptr and c.view().data_ptr() == ptr, "reset must not reallocate"
            assert c.extent == P and torch.equal(c.view(), base)
    assert torch.equal(base, pristine), "a carry wrote the shared prompt-only base"


def test_a_value_round_trips_through_one_working_carry() -> None:
    """Two sessions' values (``CarryValue``) take turns on one working carry (a shared
    binding's): each continues exactly as its own carry would, at the working carry's one
    address; the base is never written."""
    base = torch.arange(24.0).reshape(1, 6, 4)
    kw = {"dim": 1, "prompt": 2, "history": 3, "order": Order.OLDEST_FIRST, "capacity": 9}
    work, own = Carry(base.clone(), **kw), [Carry(base.clone(), **kw) for _ in range(2)]
    values = [work.initial_value() for _ in range(2)]
    address = work.data_ptr()
    for step in range(4):
        for i in (0, 1):
            new = torch.full((1, 2, 4), 100.0 * i + step)
            work.load(values[i])
            work.append(new)
            work.save(values[i])
            own[i].append(new)
            assert values[i].extent == own[i].extent
            assert torch.equal(values[i].buffer.narrow(1, 0, own[i].extent), own[i].view())
    assert work.data_ptr() == address and values[0].nbytes == work.buffer.numel() * 4
    with pytest.raises(ValueError, match="initial_value"):
        work.load(Carry(base.clone(), **{**kw, "capacity": 10}).initial_value())

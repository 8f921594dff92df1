"""A toy streaming attention operator with a carry-backed cache, shared by the replay tests.

Each call takes ``x [B, n, d]`` (``n`` new frames), projects q/k/v with seeded random weights,
attends over ``h = cat([kv_new, cache])`` along the frame clock (newest first, like the DiT
estimator) and returns ``(out, h)``. Retention keeps ``history`` newest frames and the
``prompt`` tail (``Order.NEWEST_FIRST``), so the attended extents before a call walk
``prompt, prompt + chunk, ...`` up to the bound ``prompt + history``: a small finite catalog.

Two disciplines over the same operator, which must agree bit for bit on every call:

- stock: the cache is a fresh tensor per call (``stock_retention`` allocates);
- carry: the replayed callable reads the carry's live view (an ALIASED input, one signature per
  extent) and returns ``h``; retention (Python bookkeeping: ``extent``) runs after it, outside
  the replayed callable, as ``engine/replay.py`` requires.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from engine.carry import Carry, stock_retention
from engine.contract import Order
from engine.signature import Catalog, Signature, TensorSpec

CLOCK_DIM = 2  # cache layout [k|v, B, frames, d]


@dataclass(frozen=True)
class ToyConfig:
    """Sizes of the toy. Defaults are CPU-small; GPU tests pass larger ones."""

    batch: int = 1
    dim: int = 16
    prompt: int = 6
    history: int = 8
    chunk: int = 4
    flush: int = 2
    max_turn: int = 12  # most full chunks in one turn before its flush
    seed: int = 0
    dtype: torch.dtype = torch.float32

    @property
    def bound(self) -> int:
        return self.prompt + self.history

    def extents(self) -> list[int]:
        """Attended extents a call can see: prompt, prompt + chunk, ..., capped at the bound."""
        seen, e = [], self.prompt
        while e not in seen:
            seen.append(e)
            e = e + self.chunk if e + self.chunk <= self.bound else self.bound
        return seen


class ToyAttention:
    """Single-head attention over ``cat([kv_new, cache])``; weights are seeded random."""

    def __init__(self, cfg: ToyConfig, device: torch.device | str) -> None:
        g = torch.Generator().manual_seed(cfg.seed)
        d = cfg.dim

        def rand(*shape: int) -> Tensor:
            return (torch.randn(*shape, generator=g) / math.sqrt(d)).to(device, cfg.dtype)

        self.cfg, self.device = cfg, torch.device(device)
        self.w_q, self.w_k, self.w_v = rand(d, d), rand(d, d), rand(d, d)
        self.base = torch.randn(2, cfg.batch, cfg.prompt, d, generator=g).to(device, cfg.dtype)
        self.scale = d**-0.5

    def step(self, x: Tensor, cache: Tensor) -> tuple[Tensor, Tensor]:
        """One call: ``(out [B, n, d], h [2, B, n + extent, d])``. Pure: no Python state."""
        kv_new = torch.stack([x @ self.w_k, x @ self.w_v])
        h = torch.cat([kv_new, cache], dim=CLOCK_DIM)
        q = x @ self.w_q
        att = torch.softmax((q @ h[0].transpose(-1, -2)) * self.scale, dim=-1)
        return att @ h[1], h

    def carry(self) -> Carry:
        cfg = self.cfg
        return Carry(
            self.base,
            dim=CLOCK_DIM,
            prompt=cfg.prompt,
            history=cfg.history,
            order=Order.NEWEST_FIRST,
            capacity=cfg.bound,
        )

    def stock_retain(self, h: Tensor) -> Tensor:
        cfg = self.cfg
        return stock_retention(h, CLOCK_DIM, cfg.prompt, cfg.history, Order.NEWEST_FIRST)

    def catalog(self, carry: Carry) -> Catalog:
        """Every (chunk size, extent) signature of ``step(x, carry.view())``, from specs only."""
        cfg, stride = self.cfg, carry.view().stride()
        sigs = []
        for n in (cfg.chunk, cfg.flush):
            for e in cfg.extents():
                x = TensorSpec((cfg.batch, n, cfg.dim), cfg.dtype, self.device)
                cache = TensorSpec((2, cfg.batch, e, cfg.dim), cfg.dtype, self.device, stride)
                sigs.append(Signature.of((x, cache)))
        return Catalog(sigs)


def stream_plan(cfg: ToyConfig, calls: int, seed: int) -> list[int | None]:
    """Chunk sizes of a stream of ``calls`` calls; ``None`` marks a turn reset (not a call).

    Turns are 0..max_turn full chunks, then one flush chunk, then a reset.
    """
    rng = random.Random(seed)
    plan: list[int | None] = []
    while sum(n is not None for n in plan) < calls:
        plan += [cfg.chunk] * rng.randint(0, cfg.max_turn) + [cfg.flush, None]
    out, made = [], 0
    for n in plan:
        if n is not None and made == calls:
            break
        out.append(n)
        made += n is not None
    return out


def inputs(cfg: ToyConfig, plan: list[int | None], seed: int, device: Any) -> Iterator[Tensor]:
    """Seeded random ``x`` per call of ``plan`` (never zeros)."""
    g = torch.Generator().manual_seed(seed)
    for n in plan:
        if n is not None:
            yield torch.randn(cfg.batch, n, cfg.dim, generator=g).to(device, cfg.dtype)


@dataclass
class StreamReport:
    calls: int = 0
    exact: int = 0
    decisions: list[str] = field(default_factory=list)


def compare_stream(
    toy: ToyAttention,
    op: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
    carry: Carry,
    plan: list[int | None],
    seed: int,
    decision: Callable[[], str] = lambda: "",
) -> StreamReport:
    """Run the stock path and ``op`` over the carry side by side; count bit-exact calls.

    A call is exact when ``out`` and the retained cache both equal the stock ones
    (``torch.equal``). Both start from the prompt-only state; turn resets reset both.
    """
    report = StreamReport()
    cache, xs = toy.base.clone(), inputs(toy.cfg, plan, seed, toy.device)
    carry.reset()
    for n in plan:
        if n is None:
            cache = toy.base.clone()
            carry.reset()
            continue
        x = next(xs)
        out_s, h_s = toy.step(x, cache)
        cache = toy.stock_retain(h_s)
        out_r, h_r = op(x, carry.view())
        report.decisions.append(decision())
        carry.retain(h_r)
        report.calls += 1
        report.exact += bool(torch.equal(out_s, out_r) and torch.equal(cache, carry.view()))
    return report


def prime(
    toy: ToyAttention,
    op: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
    carry: Carry,
    rounds: int = 2,
) -> None:
    """Warm and capture every catalog class: turns of 0..len(extents) full chunks + a flush,
    ``rounds`` times (warm-up calls + 1), then reset the carry."""
    cfg = toy.cfg
    plan: list[int | None] = []
    for _ in range(rounds):
        for k in range(len(cfg.extents()) + 1):
            plan += [cfg.chunk] * k + [cfg.flush, None]
    xs = inputs(cfg, plan, seed=10_000, device=toy.device)
    carry.reset()
    for n in plan:
        if n is None:
            carry.reset()
            continue
        _, h = op(next(xs), carry.view())
        carry.retain(h)
    carry.reset()

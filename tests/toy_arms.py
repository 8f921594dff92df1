"""A toy chunk stream that runs under any of the six arms and may switch arm between calls.

One *chunk* runs ``steps`` toy attention steps (``tests/toy.py``), each with its own retained
cache — the shape of the token2wav CFM: a solver step reads and extends its own cache. The arms:

- state rule off: each step's cache is a fresh tensor per call (stock ``torch.cat`` retention);
- state rule on: each step's cache is a :class:`~engine.carry.Carry` at one address;
- replay at step granularity: one replayed operator per step call;
- replay at chunk granularity: one replayed operator for the whole chunk.

Retention always runs after the replayed callable (Python bookkeeping never lives in a graph).
A switch moves state by value (carry <-> fresh tensors), so the next call reads identical bits.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from engine.arms import Arm, Granularity
from engine.replay import ReplayEngine, ReplayOp
from engine.signature import Catalog, Signature, TensorSpec
from tests.toy import ToyAttention


class ToyChunkStream:
    """A stream of chunks over ``steps`` caches; implements :class:`engine.arms.ArmedStream`."""

    def __init__(self, toy: ToyAttention, replay: ReplayEngine, arm: Arm, steps: int = 2) -> None:
        self.toy, self.steps, self._arm = toy, steps, arm
        self.carries = [toy.carry() for _ in range(steps)]
        self.caches: list[Tensor] = [toy.base.clone() for _ in range(steps)]
        self.ops = self._register(replay)

    @property
    def arm(self) -> Arm:
        return self._arm

    def set_arm(self, arm: Arm) -> None:
        """Move the state into ``arm``'s representation; takes effect at the next call."""
        if arm.state_rule and not self._arm.state_rule:
            for carry, cache in zip(self.carries, self.caches, strict=True):
                carry.retain(cache)  # within the bound: retention keeps it whole, in place
        elif self._arm.state_rule and not arm.state_rule:
            self.caches = [carry.view().clone() for carry in self.carries]
        self._arm = arm

    def reset(self) -> None:
        """Turn reset: back to the prompt-only state in either representation."""
        for carry in self.carries:
            carry.reset()
        self.caches = [self.toy.base.clone() for _ in range(self.steps)]

    def chunk(self, x: Tensor) -> Tensor:
        """One call: ``steps`` chained attention steps; returns the last step's output."""
        arm, views = self._arm, self._views()
        if arm.granularity is Granularity.CHUNK:
            result: tuple[Tensor, ...] = self.ops[("chunk", arm.state_rule)](x, *views)
            out, *hs = result
        else:
            hs = []
            for s, view in enumerate(views):
                step = self.ops[(f"step{s}", arm.state_rule)] if arm.replay else self.toy.step
                x, h = step(x, view)
                hs.append(h)
            out = x
        self._retain(hs)
        return out

    # -- internals ----------------------------------------------------------------------------

    def _views(self) -> list[Tensor]:
        if self._arm.state_rule:
            return [carry.view() for carry in self.carries]
        return self.caches

    def _retain(self, hs: Sequence[Tensor]) -> None:
        if self._arm.state_rule:
            for carry, h in zip(self.carries, hs, strict=True):
                carry.retain(h)
        else:
            self.caches = [self.toy.stock_retain(h) for h in hs]

    def _run_chunk(self, x: Tensor, *caches: Tensor) -> tuple[Tensor, ...]:
        hs = []
        for cache in caches:
            x, h = self.toy.step(x, cache)
            hs.append(h)
        return (x, *hs)

    def _register(self, replay: ReplayEngine) -> dict[tuple[str, bool], ReplayOp]:
        """Operators per (unit, state rule): carry views are ALIASED (one address per step, so
        one operator per step), the stock path's fresh caches are STAGED (copied per call)."""
        cfg, dev = self.toy.cfg, self.toy.device
        ops: dict[tuple[str, bool], ReplayOp] = {}
        for state_rule in (False, True):
            stride = self.carries[0].view().stride() if state_rule else None
            step_sigs, chunk_sigs = [], []
            for n in (cfg.chunk, cfg.flush):
                x = TensorSpec((cfg.batch, n, cfg.dim), cfg.dtype, dev)
                for e in cfg.extents():
                    cache = TensorSpec((2, cfg.batch, e, cfg.dim), cfg.dtype, dev, stride)
                    step_sigs.append(Signature.of((x, cache)))
                    chunk_sigs.append(Signature.of((x,) + (cache,) * self.steps))
            tag = "carry" if state_rule else "stock"
            aliased = tuple(range(1, self.steps + 1)) if state_rule else ()
            ops[("chunk", state_rule)] = replay.register(
                f"toy_chunk_{tag}", self._run_chunk, catalog=Catalog(chunk_sigs), aliased=aliased
            )
            for s in range(self.steps):
                ops[(f"step{s}", state_rule)] = replay.register(
                    f"toy_step{s}_{tag}",
                    self.toy.step,
                    catalog=Catalog(step_sigs),
                    aliased=(1,) if state_rule else (),
                )
        return ops

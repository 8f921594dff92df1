"""ExactShapeReplay, the compute rule: one CUDA graph per catalog signature (paper §3.3-3.4).

::

    engine = ReplayEngine(torch.device("cuda"))
    op = engine.register("dit", step, catalog=catalog, aliased=["cache"])
    out = op(x, cache=carry.view())   # eager, capture or replay; always the eager result
    engine.seal()                     # after warm-up: a later capture is a bug (miss "sealed")

A call is replayed only if (i) its :class:`~engine.signature.Signature` is in the operator's
catalog and was captured, (ii) every aliased input and write-through region is at the address
recorded at capture, and (iii) its class passed effect classification. Everything else runs
eagerly and is counted with its reason; outputs are never wrong, only slower.

Life of a signature class: ``warmup_calls`` eager calls on the capture side stream (the first
one is the probationary call that watches the random generators: host randomness rejects the
class for good, device randomness is admitted and flagged), then one capture whose output comes
from the graph's first replay, then replays. A drift drops the graph (event ``invalidation``)
and the class warms up again; after ``max_recaptures`` drifts it is rejected
(``unstable_address``). A failed capture, out-of-memory included, leaves the class eager
(event ``fallback``) with the stream, allocator pool and device generator restored. On a
multiplexer lane, an operator registered with ``lane_probe=True`` skips the eager calls of a
class another session's engine already probed on the lane: it takes the lane's classification
(``GraphLane.probed``; counted as ``lane_probes``) and goes straight to capture.

Constraints on a replayed callable (``fn``):

- Python side effects happen at capture only, never on replay (e.g. a carry's ``extent``):
  keep such bookkeeping outside ``fn``. Host values read inside ``fn`` are frozen at capture.
- Tensors ``fn`` writes in place must be aliased inputs (``aliased``) or write-through regions
  (``write_through``): a staged input is a copy, so writes to it never reach the caller.
- Device randomness only from the default CUDA generator of the engine's device (other
  ``torch.Generator`` objects are neither probed nor registered with the graph).
- The engine's device must be the current CUDA device; replays run on the current stream.
- Inference only: warm-up and capture run under ``torch.no_grad()``; outputs carry no history.
  Callers may hold ``torch.inference_mode`` (cheaper host dispatch; the Token2Wav adapter does,
  as its vendor): buffers staged inside it are inference tensors, so call every operator of an
  engine from inside it, or never.
- With ``copy_out=False`` the caller gets the graph's static outputs, valid until the next
  replay of ANY operator of the engine (graphs share one memory pool): consume immediately.
  An engine on a multiplexer lane (``lane``, :mod:`engine.graph_lane`) shares its side stream,
  pool and staging buffers with the other sessions' engines on the lane, so the rule would reach
  every session on it: such an engine delivers copies only (``register`` refuses
  ``copy_out=False``).

Miss reasons: ``disabled`` (kill switch ``DUPLEXCADENCE_NO_REPLAY=1`` or ``enabled=False``),
``unkeyable``, ``not_in_catalog``, ``foreign_device``, ``warmup``, ``sealed``, ``drift``,
``unstable_address``, ``host_randomness``, ``fallback``, ``broken`` (generator unrecoverable).
Without CUDA the engine makes every decision and counts it, but "replays" run ``fn`` eagerly
on the staged static inputs, so the admission logic and staging are tested on the CPU (there
the torch generator is the host's: an operator drawing from it is rejected, ``host_randomness``).
An engine is not thread-safe: the one engine thread that owns every CUDA call owns it.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor

from engine.capture import capture_graph, probe_effects
from engine.graph_lane import GraphLane, current_lane
from engine.replay_parts import (
    Binding,
    CaptureFailed,
    OpCounters,
    ReplayError,
    ReplayEvent,
    SignatureClass,
    deliver,
    poison_targets,
    resolve_slots,
)
from engine.signature import Catalog, Signature, Slot, Unkeyable, key_call

__all__ = [
    "ENV_KILL_SWITCH",
    "OpCounters",
    "ReplayEngine",
    "ReplayError",
    "ReplayEvent",
    "ReplayOp",
]

ENV_KILL_SWITCH = "DUPLEXCADENCE_NO_REPLAY"
logger = logging.getLogger("duplexcadence.replay")


class ReplayOp:
    """One registered operator: call it like ``fn``. Made by :meth:`ReplayEngine.register`.

    ``last_decision`` is ``"capture"``, ``"replay"`` or ``"eager:<reason>"`` for the last call.
    """

    def __init__(
        self,
        replay: ReplayEngine,
        name: str,
        fn: Callable[..., Any],
        *,
        catalog: Catalog,
        aliased: Sequence[Slot],
        write_through: Callable[[], Sequence[Tensor]] | None,
        copy_out: bool,
        extra_key: Callable[[], Hashable] | None,
        lane_probe: bool = False,
    ) -> None:
        self.replay, self.name, self.fn, self.catalog = replay, name, fn, catalog
        self.aliased = resolve_slots(fn, aliased)
        self.write_through, self.copy_out, self.extra_key = write_through, copy_out, extra_key
        self.lane_probe = lane_probe
        self.counters = OpCounters()
        self.last_decision = ""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.replay._dispatch(self, args, kwargs)

    def regions(self) -> tuple[Tensor, ...]:
        """The declared write-through regions, as they are now."""
        return tuple(self.write_through()) if self.write_through is not None else ()

    def captured(self) -> list[Signature]:
        """Signatures that have a live graph (or a simulated one, without CUDA)."""
        return self.replay._captured(self)

    def uncaptured(self) -> list[Signature]:
        """Catalog signatures not captured yet: warm these before ``seal()``."""
        done = {sig.without_extra() for sig in self.captured()} | set(self.captured())
        return [sig for sig in self.catalog if sig not in done]


class ReplayEngine:
    """The dispatcher: the one object that knows which graphs exist, and all their counters.

    Args:
        device: where graphs run. A non-CUDA device (or ``cpu``) simulates replay.
        enabled: ``False`` (or env ``DUPLEXCADENCE_NO_REPLAY=1`` at construction) runs all eager.
        warmup_calls: eager calls per class before capture (>= 1: the first is the probe).
        strict: raise :class:`ReplayError` on a capture attempted after :meth:`seal` (tests).
        poison: fill static outputs with NaN before every replay (tests), so a stale result
            can never pass as a replayed one.
        max_recaptures: drifts a class may survive before it is rejected (``unstable_address``).
        max_events: events kept until :meth:`drain_events` (oldest dropped first).
        eager_guard: what every call that reads the default generator outside a replay (an
            eager call, a warm-up, a capture) runs under; a multiplexed session's generator
            state and lock (``engine.multiplex.SessionRng.eager``). None: nothing.
        lane: the multiplexer lane whose side stream and graph pool this engine shares
            (:mod:`engine.graph_lane`); by default the one the session is being opened on
            (``on_lane``), else none: the engine's own stream and pool. Without CUDA only its
            staging buffers are shared.
        lane_probe: the default of ``register``'s ``lane_probe`` for this engine's operators
            (a family whose operators all qualify says so once).
    """

    def __init__(
        self,
        device: torch.device | str,
        *,
        enabled: bool = True,
        warmup_calls: int = 1,
        strict: bool = False,
        poison: bool = False,
        max_recaptures: int = 3,
        max_events: int = 10_000,
        eager_guard: Callable[[], AbstractContextManager[None]] | None = None,
        lane: GraphLane | None = None,
        lane_probe: bool = False,
    ) -> None:
        if warmup_calls < 1:
            raise ValueError(
                f"warmup_calls={warmup_calls}: need >= 1, the first eager call is the effect probe"
            )
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise ValueError(f"device {self.device} but CUDA is unavailable: pass device='cpu'")
        if self.cuda and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        killed = os.environ.get(ENV_KILL_SWITCH, "").strip().lower() in {"1", "true", "yes", "on"}
        self.enabled = enabled and not killed
        self.warmup_calls, self.strict, self.poison = warmup_calls, strict, poison
        self.max_recaptures = max_recaptures
        self._guard = eager_guard or nullcontext
        self._ops: dict[str, ReplayOp] = {}
        self._classes: dict[tuple[str, Signature], SignatureClass] = {}
        self._events: deque[ReplayEvent] = deque(maxlen=max_events)
        self._sealed = False
        self._broken: str | None = None
        # Warm-up and capture share one side stream: cuBLAS workspaces are per stream.
        self.lane = lane or current_lane()
        if self.lane is not None and self.cuda:
            self._stream: torch.cuda.Stream | None = self.lane.stream
        else:
            self._stream = torch.cuda.Stream(device=self.device) if self.cuda else None  # type: ignore[no-untyped-call]
        self._pool_handle: Any = None
        self.lane_probe = lane_probe

    # -- public API -------------------------------------------------------------------------

    @property
    def simulated(self) -> bool:
        """True without CUDA: decisions are made and counted, replays run ``fn`` eagerly."""
        return not self.cuda

    @property
    def sealed(self) -> bool:
        return self._sealed

    def register(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        catalog: Catalog,
        aliased: Sequence[Slot] = (),
        write_through: Callable[[], Sequence[Tensor]] | None = None,
        copy_out: bool = True,
        extra_key: Callable[[], Hashable] | None = None,
        lane_probe: bool | None = None,
    ) -> ReplayOp:
        """Register ``fn`` under a unique ``name``; see the module docstring for its constraints.

        ``catalog``: the signatures it may be specialized for (``Catalog.any()`` to admit all,
        explicitly). ``aliased``: argument positions/names of contract-owned inputs the graph
        reads in place. ``write_through``: returns the tensors ``fn`` writes by closure.
        ``extra_key``: folded into every signature (e.g. the pinned SDPA backend).
        ``lane_probe``: on a multiplexer lane, a class another session already probed there
        needs no eager warm-up here (see :mod:`engine.graph_lane`): ``fn`` is the same code
        under this name in every session of the lane, and its first call makes nothing lazily
        (None: the engine's ``lane_probe``).
        """
        if not isinstance(catalog, Catalog):
            raise TypeError(
                f"register({name!r}): catalog must be a Catalog, got {type(catalog).__name__}; "
                "pass Catalog.any() to admit every signature explicitly"
            )
        if name in self._ops:
            raise ValueError(f"register({name!r}): name taken; give each operator its own name")
        if not copy_out and self.lane is not None:
            raise ValueError(
                f"register({name!r}): copy_out=False on a multiplexer lane, whose graphs share "
                "one pool with the other sessions' (a static output is valid only until the "
                "lane's next replay): register it with copy_out=True"
            )
        op = ReplayOp(
            self,
            name,
            fn,
            catalog=catalog,
            aliased=aliased,
            write_through=write_through,
            copy_out=copy_out,
            extra_key=extra_key,
            lane_probe=self.lane_probe if lane_probe is None else lane_probe,
        )
        self._ops[name] = op
        return op

    def seal(self) -> None:
        """Latch capture off (after warm-up): any later capture is a miss ``sealed``."""
        self._sealed = True

    def unseal(self) -> None:
        """Re-open capture, e.g. to warm a new catalog after a voice (prompt length) change."""
        self._sealed = False

    def drain_events(self) -> list[ReplayEvent]:
        """Events since the last drain, oldest first."""
        events = list(self._events)
        self._events.clear()
        return events

    def reset_counters(self) -> None:
        """Zero every operator's counters; graphs and class states are kept."""
        for op in self._ops.values():
            op.counters = OpCounters()

    def snapshot(self) -> dict[str, Any]:
        """Plain JSON-able counters: ``{"ops": {name: counters}, "total": counters, ...}``."""
        ops = {}
        for name, op in self._ops.items():
            ops[name] = op.counters.to_dict() | {"classes": len(self._captured(op))}
        total = OpCounters.sum_dicts(list(ops.values()))
        return {
            "enabled": self.enabled,
            "sealed": self._sealed,
            "simulated": self.simulated,
            "ops": ops,
            "total": total,
        }

    # -- the dispatcher ---------------------------------------------------------------------

    def _dispatch(self, op: ReplayOp, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self.enabled or self._broken:
            return self._eager(op, "disabled" if not self.enabled else "broken", args, kwargs)
        try:
            extra = op.extra_key() if op.extra_key is not None else None
            sig, leaves, slots = key_call(args, kwargs, extra)
        except Unkeyable:
            return self._eager(op, "unkeyable", args, kwargs)
        cls = self._classes.get((op.name, sig))
        if cls is None:
            if not op.catalog.admits(sig):
                return self._eager(op, "not_in_catalog", args, kwargs)
            cls = self._new_class(op, sig, leaves, slots)
        if cls.rejected is not None:
            return self._eager(op, cls.rejected, args, kwargs)
        if cls.binding is not None:
            drift = self._drift(op, cls.binding, leaves)
            if drift is None:
                op.counters.hits += 1
                op.last_decision = "replay"
                return self._replay(op, cls.binding, leaves)
            self._invalidate(op, cls, drift)
            return self._eager(op, cls.rejected or "drift", args, kwargs)
        if self._sealed:
            return self._sealed_miss(op, sig, args, kwargs)
        if cls.warm < self.warmup_calls:
            return self._warm(op, cls, args, kwargs)
        return self._capture(op, cls, args, kwargs, leaves)

    def _new_class(
        self, op: ReplayOp, sig: Signature, leaves: list[Tensor], slots: list[Slot]
    ) -> SignatureClass:
        aliased = tuple(j for j, slot in enumerate(slots) if slot in op.aliased)
        cls = SignatureClass(sig, aliased)
        self._classes[(op.name, sig)] = cls
        if op.catalog.admit_all and not op.catalog.listed(sig):
            op.counters.open_admissions += 1
        foreign = [str(t.device) for t in leaves if t.device != self.device]
        if foreign:
            self._reject(op, cls, "foreign_device", f"{sig}: inputs on {sorted(set(foreign))}")
        elif op.lane_probe and self.lane is not None:
            self._take_lane_probe(op, cls)
        return cls

    def _take_lane_probe(self, op: ReplayOp, cls: SignatureClass) -> None:
        """The lane's classification of this class, if another session probed it there: the
        class is then warm (its next call captures) without an eager call of its own."""
        assert self.lane is not None
        known = self.lane.probed((op.name, cls.sig))
        if known is None:
            return
        host, device = known
        cls.probed, cls.warm = True, self.warmup_calls
        op.counters.lane_probes += 1
        if host:
            self._reject(op, cls, "host_randomness", f"{cls.sig}: drew from {host} (lane probe)")
        elif device:
            cls.device_random = True

    def _eager(self, op: ReplayOp, reason: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        op.counters.miss(reason)
        op.last_decision = f"eager:{reason}"
        with self._guard():
            return op.fn(*args, **kw)

    def _sealed_miss(
        self, op: ReplayOp, sig: Signature, args: tuple[Any, ...], kw: dict[str, Any]
    ) -> Any:
        if self.strict:
            op.counters.miss("sealed")
            raise ReplayError(
                f"{op.name}: capture of {sig} attempted after seal(): warm every catalog "
                "signature before seal() (see ReplayOp.uncaptured()), or unseal() first"
            )
        return self._eager(op, "sealed", args, kw)

    # -- warm-up, capture, replay -----------------------------------------------------------

    def _warm(self, op: ReplayOp, cls: SignatureClass, args: tuple[Any, ...], kw: Any) -> Any:
        """One eager warm-up call on the capture stream; the class's first one is the probe."""
        with self._guard():
            return self._warm_guarded(op, cls, args, kw)

    def _warm_guarded(
        self, op: ReplayOp, cls: SignatureClass, args: tuple[Any, ...], kw: Any
    ) -> Any:
        if cls.probed:
            out = self._on_side_stream(op.fn, args, kw)
        else:
            out, effects = probe_effects(
                self.device if self.cuda else None, self._on_side_stream, op.fn, args, kw
            )
            cls.probed = True
            if self.lane is not None:
                self.lane.record_probe((op.name, cls.sig), effects.host, effects.device)
            if effects.host:
                self._reject(op, cls, "host_randomness", f"{cls.sig}: drew from {effects.host}")
            elif effects.device:
                cls.device_random = True
                logger.info("%s: class draws device randomness (admitted): %s", op.name, cls.sig)
        cls.warm += 1
        reason = cls.rejected or "warmup"
        op.counters.miss(reason)
        op.last_decision = f"eager:{reason}"
        return out

    def _on_side_stream(self, fn: Callable[..., Any], args: Any, kw: Any) -> Any:
        with torch.no_grad():
            if self._stream is None:
                return fn(*args, **kw)
            current = torch.cuda.current_stream(self.device)
            self._stream.wait_stream(current)
            try:
                with torch.cuda.stream(self._stream):
                    return fn(*args, **kw)
            finally:
                current.wait_stream(self._stream)

    def _capture(
        self,
        op: ReplayOp,
        cls: SignatureClass,
        args: tuple[Any, ...],
        kw: dict[str, Any],
        leaves: list[Tensor],
    ) -> Any:
        t0 = time.perf_counter()
        capture_bytes = 0
        try:
            lane, key = self.lane, (op.name, cls.sig)
            shared = None if lane is None else (lambda j, t: lane.staging((*key, j), t))
            binding = Binding.stage(args, kw, leaves, cls.aliased, op.regions(), shared)
            if self._stream is not None:
                with self._guard():
                    capture_bytes = capture_graph(
                        binding, op.fn, self.device, self._stream, self._pool()
                    )
        except Exception as exc:
            return self._fallback(op, cls, exc, args, kw)
        if self.poison and binding.graph is not None:
            binding.poison = poison_targets(binding)
        cls.binding = binding
        out = self._replay(op, binding, leaves)
        capture_s = time.perf_counter() - t0
        op.counters.captures += 1
        op.counters.capture_s += capture_s
        op.counters.capture_bytes += capture_bytes
        op.last_decision = "capture"
        detail = f"{cls.sig} in {capture_s * 1e3:.1f} ms, {capture_bytes} B"
        self._emit("capture", op, "random" if cls.device_random else "ok", detail)
        return out

    def _pool(self) -> Any:
        """The memory pool the next capture records into: shared by every live graph.

        The allocator frees a private pool once the last graph using it is reset, and a later
        capture into that handle trips an internal assertion (seen on torch 2.11 after a failed
        capture). So when no captured graph is alive — at start, after invalidations dropped the
        last one, after a failed capture — the next capture opens a fresh pool.
        """
        if self.lane is not None and self.lane.cuda:
            return self.lane.pool(self)
        if self._pool_handle is None or not self.has_live_graph():
            self._pool_handle = torch.cuda.graph_pool_handle()
        return self._pool_handle

    def has_live_graph(self) -> bool:
        """Whether a graph this engine captured is alive (its pool is then in use)."""
        return any(
            c.binding is not None and c.binding.graph is not None for c in self._classes.values()
        )

    def _fallback(
        self, op: ReplayOp, cls: SignatureClass, exc: BaseException, args: Any, kw: Any
    ) -> Any:
        cls.rejected = "fallback"
        op.counters.fallbacks += 1
        reason = str(exc) if isinstance(exc, CaptureFailed) else f"{type(exc).__name__}: {exc}"
        self._emit("fallback", op, reason[:300], str(cls.sig))
        if isinstance(exc, CaptureFailed) and exc.unrecovered:
            # Fail closed for good: replay nothing more in a process whose CUDA state we
            # could not restore; eager keeps working (or fails loudly on its own).
            self._broken = exc.unrecovered
            self._emit("fallback", op, "broken", f"unrecovered after capture: {exc.unrecovered}")
        return self._eager(op, "fallback", args, kw)

    def _replay(self, op: ReplayOp, b: Binding, leaves: list[Tensor]) -> Any:
        """Inputs in, the graph, the outputs delivered: on a lane, in one of its turns."""
        with self.lane.turn() if self.lane is not None else nullcontext():
            for j, buf in b.staged:
                buf.copy_(leaves[j])
            if b.graph is None:
                with torch.no_grad():
                    outputs = op.fn(*b.static_args, **b.static_kwargs)
            else:
                for t, value in b.poison:
                    t.fill_(value)
                b.graph.replay()
                outputs = b.outputs
            return deliver(outputs, op.copy_out)

    # -- address stability ------------------------------------------------------------------

    def _drift(self, op: ReplayOp, b: Binding, leaves: list[Tensor]) -> str | None:
        for j, ptr in b.aliased:
            if leaves[j].data_ptr() != ptr:
                return f"aliased leaf {j} moved 0x{ptr:x} -> 0x{leaves[j].data_ptr():x}"
        if b.regions and Binding.region_keys(op.regions()) != b.regions:
            return "a write-through region moved or changed shape"
        return None

    def _invalidate(self, op: ReplayOp, cls: SignatureClass, detail: str) -> None:
        binding, cls.binding, cls.warm = cls.binding, None, 0
        if self.cuda and binding is not None and binding.graph is not None:
            # The last replay may still run; its graph and pool memory are freed right after.
            # Destroying it also frees the side stream's cuBLAS workspace, which this engine's
            # other graphs were captured with (engine.graph_lane; tests/gpu/lane_workspace.py).
            torch.cuda.current_stream(self.device).synchronize()
        del binding
        cls.invalidations += 1
        op.counters.invalidations += 1
        self._emit("invalidation", op, "drift", f"{cls.sig}: {detail}")
        if cls.invalidations > self.max_recaptures:
            self._reject(op, cls, "unstable_address", f"{cls.invalidations} drifts: {cls.sig}")

    # -- bookkeeping ------------------------------------------------------------------------

    def _reject(self, op: ReplayOp, cls: SignatureClass, reason: str, detail: str) -> None:
        cls.rejected = reason
        op.counters.rejections += 1
        self._emit("rejection", op, reason, detail)

    def _emit(self, kind: str, op: ReplayOp, reason: str, detail: str) -> None:
        event = ReplayEvent(kind, op.name, reason, time.perf_counter(), detail)
        self._events.append(event)
        level = logging.INFO if kind == "capture" else logging.WARNING
        logger.log(level, "%s %s: %s (%s)", kind, op.name, reason, detail)

    def _captured(self, op: ReplayOp) -> list[Signature]:
        return [
            cls.sig
            for (name, _), cls in self._classes.items()
            if name == op.name and cls.binding is not None
        ]

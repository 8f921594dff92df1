"""A multiplexer lane's graph resources, shared by the replay engines of its sessions.

A lane (``engine.multiplex``) runs one session's period at a time, in order, on one CUDA stream.
So the graphs of all its sessions never replay concurrently, and they may share what one
engine's graphs already share (``engine.replay``):

- **the side stream** warm-up and capture run on: cuBLAS handles and workspaces are per stream,
  and the caching allocator reuses a freed block only on the stream that freed it, so a stream
  per session kept every session's warm-up blocks to itself (reserved, never reused by the next
  session);
- **the graph memory pool** captures record into: a capture reuses the blocks earlier captures
  freed (their temporaries), so the lane holds the largest graph's workspace once, not once per
  session. What a session's graphs keep (static outputs) stays allocated and is never shared;
- **the staging buffers** of non-aliased inputs, one per operator, signature and input: every
  replay copies its inputs in first, so sessions of one lane need one set, not one each (a
  Token2Wav session's conformer caches are staged per call class: ~17 MiB each at full size).

The price is the engine's output rule widened to the lane: a graph's outputs may overlap
another graph's temporaries, so they are valid until the next replay of any graph of any session
on the lane. Engines on a lane therefore deliver copies only (``copy_out=True``): the copy runs
on the lane's stream right after the replay, before the lane can run anything else
(:meth:`engine.replay.ReplayEngine.register` refuses ``copy_out=False`` there).

Closing a session never frees memory another session's graphs use: the pool lives while any
graph captured into it lives (the allocator counts them); its free blocks stay with the lane for
the next session's captures. When no graph is left, the next capture opens a fresh pool (a
capture into a released pool trips an allocator assertion).

One thing the lane shares is not ours to hold: **the stream's cuBLAS workspace**. Every graph
captured on the stream bakes in its address, and torch frees it when *any* graph captured on
that stream is destroyed (``CUDAGraph.reset`` calls ``clearCublasWorkspacesForStream``,
pytorch/pytorch#193402); so do inductor's CUDA graph trees, for every stream, around each of
their recordings. Closing a session mid-traffic is such a destruction; that the lane's other
graphs stay whole after it (equal to eager, writing nothing into memory allocated since, before
and after the cache is emptied) is what ``tests/gpu/lane_workspace.py`` checks: it passed on the
H200 (torch 2.11, 2026-12-03), and ``bench/capacity.py --open-during`` closes a session while
the others speak.

And **what the lane's stream already ran**: the effect classification of every (operator,
signature) class a session's probationary call classified on the lane. A later session's
operator registered with ``lane_probe=True`` (its code is the same function of the shared
weights under the same name, and its first call makes nothing lazily: every tensor it writes
exists before it) takes that classification instead of running its own probe: the probe's
eager call would classify the same code on the same shapes again, and warm kernels, cuBLAS
handles and workspaces this stream already holds. Such a class goes straight to capture; its
outputs are the graph's first replay, as for any capture, so exactness is unchanged.

**Turns.** What uses the lane's pool and staging buffers runs in a turn (:meth:`GraphLane.turn`):
a period of one of its sessions (the lane's worker holds a turn for the whole period), or one
replay of the session being opened on it (its warm-up's). A turn holds the lane's lock and, on
CUDA, starts after the work of the turn before it on any stream (an event the last turn recorded
on its stream). So a session opened on a lane while its other sessions speak runs its eager
warm-up and its captures beside their periods (a capture records, it runs nothing; it copies
nothing into a shared staging buffer), and each of its replays between two of their periods.
A period may wait, inside its turn, for the generator lock an opening holds throughout; so an
opening waits for a turn with that lock let go (:func:`yielding`).

The multiplexer opens each session inside :func:`on_lane`; a replay engine made there (by any
adapter) takes the lane's resources. Nothing here knows a model family.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

import torch
from torch import Tensor

__all__ = ["GraphLane", "current_lane", "on_lane", "yielding"]


class _Engine(Protocol):
    def has_live_graph(self) -> bool: ...


class GraphLane:
    """One lane's capture stream and graph memory pool (CUDA; on the CPU only the staging
    buffers are shared: there are no graphs, and replays are simulated on staged inputs)."""

    def __init__(self, device: torch.device, index: int = 0) -> None:
        self.device, self.index = device, index
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None  # type: ignore[no-untyped-call]
        self._handle: Any = None
        self._engines: weakref.WeakSet[Any] = weakref.WeakSet()
        self._staged: weakref.WeakValueDictionary[Hashable, Tensor] = weakref.WeakValueDictionary()
        self._probed: dict[Hashable, tuple[tuple[str, ...], bool]] = {}
        self._lock = threading.RLock()
        self._last: torch.cuda.Event | None = None  # recorded where the last turn ended

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Use the lane's pool and staging buffers: one turn at a time (a thread may nest its
        turns), each after the last one's work on whatever stream it ran. A thread inside
        :func:`yielding` lets that lock go while it waits (a period may be waiting for it)."""
        self._take()
        try:
            if not self.cuda:
                yield
                return
            current = torch.cuda.current_stream(self.device)
            if self._last is not None:
                current.wait_event(self._last)
            try:
                yield
            finally:
                self._last = torch.cuda.Event()  # type: ignore[no-untyped-call]
                self._last.record(current)
        finally:
            self._lock.release()

    def _take(self) -> None:
        held = _YIELDING.get()
        if held is None:
            self._lock.acquire()
            return
        with held:  # wait() lets the lock go, at every depth this thread holds it, and retakes it
            while not self._lock.acquire(blocking=False):
                held.wait(0.001)

    def probed(self, key: Hashable) -> tuple[tuple[str, ...], bool] | None:
        """What the probationary call of class ``key`` (operator name, signature) found on this
        lane: (host generators it drew from, whether it drew device randomness); None: not
        probed here yet."""
        return self._probed.get(key)

    def record_probe(self, key: Hashable, host: tuple[str, ...], device: bool) -> None:
        """Keep what a probationary call of class ``key`` found, for the lane's later sessions."""
        self._probed[key] = (host, device)

    def staging(self, key: Hashable, like: Tensor) -> Tensor:
        """The static input buffer of ``key`` (operator, signature, leaf) on this lane, shaped
        and strided as ``like``: one for every session whose graph of that class reads it. A
        replay copies its inputs in right before it runs, and the lane runs one replay at a
        time, so what a buffer held before never matters; it lives while a graph reads it."""
        buf = self._staged.get(key)
        if buf is None or buf.shape != like.shape or buf.stride() != like.stride():
            buf = torch.empty_strided(
                like.shape, like.stride(), dtype=like.dtype, device=like.device
            )
            self._staged[key] = buf
        return buf

    def pool(self, engine: _Engine) -> Any:
        """The pool ``engine``'s next capture records into: the lane's, or a fresh one when no
        graph of any engine on the lane is alive."""
        live = any(e.has_live_graph() for e in list(self._engines))
        self._engines.add(engine)
        if self._handle is None or not live:
            self._handle = torch.cuda.graph_pool_handle()
        return self._handle

    def pool_bytes(self) -> dict[str, int]:
        """The lane's pool as the allocator holds it: ``reserved`` (its segments) and
        ``allocated`` (what live graphs' outputs keep); zeros before the first capture."""
        out = {"reserved": 0, "allocated": 0}
        if self._handle is None:
            return out
        handle = tuple(self._handle)
        for segment in torch.cuda.memory_snapshot():  # type: ignore[no-untyped-call]
            if tuple(segment.get("segment_pool_id", ())) == handle:
                out["reserved"] += int(segment["total_size"])
                out["allocated"] += int(segment["allocated_size"])
        return out


_LANE: ContextVar[GraphLane | None] = ContextVar("duplexcadence_graph_lane", default=None)
_YIELDING: ContextVar[threading.Condition | None] = ContextVar(
    "duplexcadence_lane_yielding", default=None
)


def current_lane() -> GraphLane | None:
    """The lane a session is being opened on (None outside :func:`on_lane`)."""
    return _LANE.get()


@contextmanager
def on_lane(lane: GraphLane | None) -> Iterator[None]:
    """Replay engines made inside share ``lane``'s stream and pool (None: their own)."""
    token = _LANE.set(lane)
    try:
        yield
    finally:
        _LANE.reset(token)


@contextmanager
def yielding(held: threading.Condition) -> Iterator[None]:
    """This thread holds ``held``'s lock (the multiplexer's generator lock, while it opens a
    session) and a lane's period may wait for it while holding the lane's turn: inside, waiting
    for a turn lets the lock go (``held.wait``), so the two never wait for each other."""
    token = _YIELDING.set(held)
    try:
        yield
    finally:
        _YIELDING.reset(token)

"""Many exact sessions of one family in one process (paper §2.2, "When N independent sessions
share one accelerator").

::

    mux = Multiplexer(torch.device("cuda"), capacity=Capacity(sessions=8, lanes=4))
    sid = mux.admit(lambda rng: open_session(rng), period_s=0.08, state_bytes=declared)
    mux.submit(sid, mic, due=t)       # a period of input, due at ``t`` (perf_counter seconds)
    done = mux.drain()                # earliest deadline first, each session's periods in order
    mux.close(sid)                    # its state freed at once

**What is shared and what is not.** The family's weights (and their device-resident constants)
are loaded once; every session brings its own state: carry, rings, regions, sized by the
declaration. Replay bindings come two ways (paper §2.2 allows both), chosen per family by
arithmetic (full sizes, H200; ``docs/scaling.md`` has the measured table):

- *One set of bindings per lane (and voice): Token2Wav* (``adapters.token2wav.shared``). The
  graphs are captured once, by the first session of a voice on a lane, over the lane's own
  working state; every session owns only its declared state (carry and conv region: 575 MiB at
  A = 458 frames; its conformer caches, at most 17.9; its vocoder tails), copied into the
  lane's bound state before its period and out after, on the lane's stream: 2 x 575 MiB per
  1-s period, ~0.6 ms of HBM time. A later admission captures nothing: it allocates its state
  and writes the reset state into it (the per-session bindings took ~6.5 s and 8 captures, and
  ~240 MiB beyond the declared state: the graphs' static outputs ~76 and executables ~165,
  measured 2026-12-02). The constant is per set of bindings, not per session: one working state
  (575), the graphs (~240) and the voice's prompt-only state. A binding bakes in one voice (its
  prompt length is in every signature, its x-vector and prompt-only state are read by the
  replayed operators), so sets are keyed by (lane, voice); and one generator state
  (:class:`BindingRng`), into which each period hands the session's seed and Philox offset.
- *Per-session bindings on shared lane resources: Moshi, PersonaPlex* (1,500 MiB declared
  rings). Each session's graphs are captured at its own state's addresses; measured on the H200
  (2026-12-03) 1,514-1,518 MiB of device memory a later Moshi session, against its declared
  1,515.9. One binding per lane would copy 2 x 1.5 GiB of rings every 80-ms frame per session,
  ~1 ms of HBM time each (10 sessions: 10 ms of every 80 ms), and each lane would keep a
  working set of rings of its own (1.5 GiB a lane) to save the graphs' executables; and a single
  binding serves one session at a time, while per-session bindings let ``lanes`` sessions
  replay at once on their own streams (a 7B Moshi frame is ~16 ms of launch-bound kernels: one
  binding time-shared caps Moshi at five sessions per 80 ms).

Either way the sessions of one lane share that lane's graph resources (:mod:`engine.graph_lane`):
the side stream warm-up and capture run on, the graph memory pool captures record into, and the
staging buffers of non-aliased inputs. A lane runs one period at a time, in order, on one CUDA
stream, so its graphs never replay concurrently; the engine's rule "static outputs are valid
until the next replay of any operator" widens to "... of any session on the lane", and holds
because a lane's engines deliver copies only: every output is copied out on the lane's stream
right after its replay, inside the period, before the lane runs anything else
(``ReplayEngine.register`` refuses ``copy_out=False`` on a lane; Token2Wav's, Moshi's and
PersonaPlex's operators all copy out, and under the state rule Moshi's frame lives in the
session's own regions). Closing a session frees its state (and its graphs, per-session; shared
bindings go with the last session on them); the lane's pool lives while any graph captured into
it lives, and keeps its free blocks for the next capture.

**Randomness.** Each session draws from its own generator state (:class:`SessionRng`), seeded by
the session alone, so its draws are those of the same session run alone. On CUDA it is a
graph-safe state of the device's default generator (``Generator.graphsafe_set_state``): a
session's graphs are captured while its state is the default one, so each graph registers that
session's state, and a replay advances that state's Philox offset and no other session's,
whichever lane replays it. Shared bindings register their own state (:class:`BindingRng`): a
replay reads the registered state's seed and offset when it is launched, so each period sets
them to the serving session's (``manual_seed``, ``set_offset``) and the session takes the
advanced offset back after (``SessionRng.hand_to`` / ``take_from``). Eager calls (a stock arm,
a miss, warm-up, capture) read the default generator, so they run while the session's state (or
the bindings' state, serving it) is installed, under one process lock
(:attr:`Multiplexer.rng_lock`: the replay engine takes it through ``ReplayEngine.eager_guard``).
On the CPU the state is the host generator's, installed around the whole period.

**Scheduling.** Due periods run earliest deadline first (deadline = due + the session's period),
a session's periods in order and never two at once. A session keeps one lane (the one with the
fewest sessions when it is admitted), so its tensors live on one CUDA stream: the caching
allocator hands a freed block out again only on its own stream, after the work that freed it, so
sessions on different streams never reuse memory another's queued kernels still read; each lane
runs its sessions' due periods earliest deadline first. ``lanes`` workers (CUDA streams) run periods
concurrently (threads on the CPU too, where they prove the scheduling). Admission control
refuses a session (one line, :class:`AdmissionRefused`) when the measured capacity would be
exceeded: the count measured for this family and arm on this device (``Capacity.sessions``),
or, for one lane, the utilization the admitted sessions' measured periods already use.

**Opening beside the others.** A session opens while the admitted ones speak: its warm-up and
captures run on its lane's side stream beside every lane's periods (captures are thread-local),
and each of its replays takes one of its lane's turns (:meth:`engine.graph_lane.GraphLane.turn`),
between two of that lane's periods. What it holds throughout is the generator lock (its state
is the default generator's while it opens), so only a period that runs eagerly (a stock arm, a
miss) waits for it; it lets the lock go while it waits for a turn (such a period may hold that
turn: :func:`engine.graph_lane.yielding`). Meanwhile the interpreter switches threads every
:data:`OPENING_SWITCH_S` (the opening's Python would otherwise keep the lanes' threads waiting
up to 5 ms each time they come back from the device). One lane waits whole: its periods install
their session's state unlocked.

Threads: ``submit`` and ``drain`` from one controlling thread, ``admit`` and ``close`` from it or
from one other (an admission then opens while the controlling thread keeps the periods coming);
the lanes are the multiplexer's own threads. Nothing here knows a model family.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from engine.graph_lane import GraphLane, on_lane, yielding
from engine.sizes import byte_text

__all__ = [
    "AdmissionRefused",
    "BindingRng",
    "Capacity",
    "Done",
    "Multiplexer",
    "SessionRng",
    "Stepper",
]

Stepper = Callable[[Any], Any]  # one period: its input in, its result out (on the engine side)
OPENING_SWITCH_S = 0.0005
"""The interpreter's switch interval while a session opens beside running lanes (default 5 ms):
an opening is Python-heavy (its warm-up and captures run the model's code), and every time a
lane's thread comes back from the device (a replay, a sync) it waits for the interpreter lock
for up to one interval; a period comes back ~10 times."""


class AdmissionRefused(RuntimeError):
    """A session the measured capacity cannot hold; the message is one line naming the fix."""


class SessionRng:
    """One session's random stream: its own state of the device's default generator.

    ``active()`` installs it for a span (a period, an eager call, the session's opening) and
    keeps what the span drew: on CUDA by swapping the generator's graph-safe state object (no
    copy; graphs captured inside hold this state and advance it on every replay), on the CPU by
    value (``get_state``/``set_state``).
    """

    def __init__(
        self, device: torch.device, seed: int, lock: threading.RLock | None = None
    ) -> None:
        self.device, self.seed, self._lock = device, seed, lock
        self.cuda = device.type == "cuda"
        self._state: Any  # a graph-safe generator state (CUDA) or the host state's bytes
        if self.cuda:
            torch.cuda.init()  # type: ignore[no-untyped-call]  # makes the default generators
            index = device.index if device.index is not None else torch.cuda.current_device()
            self._generator = torch.cuda.default_generators[index]
            self._state = self._generator.clone_state()
            self._state.manual_seed(seed)
        else:
            self._generator = torch.default_generator
            self._state = torch.Generator().manual_seed(seed).get_state()

    @contextmanager
    def active(self) -> Iterator[None]:
        gen = self._generator
        if self.cuda:
            swapped = gen.graphsafe_get_state()
            gen.graphsafe_set_state(self._state)
            try:
                yield
            finally:
                gen.graphsafe_set_state(swapped)
        else:
            saved = gen.get_state()
            gen.set_state(self._state)
            try:
                yield
            finally:
                self._state = gen.get_state()
                gen.set_state(saved)

    def reseed(self) -> None:
        """Back to the stream's first draw (the session's conversation starts again)."""
        if self.cuda:
            self._state.manual_seed(self.seed)
        else:
            self._state = torch.Generator().manual_seed(self.seed).get_state()

    def eager(self) -> AbstractContextManager[None]:
        """What the session's replay engine runs an eager call under (``eager_guard``): with
        concurrent lanes, the process's generator lock and this state installed; otherwise
        nothing (the period already holds the state)."""
        if self._lock is None:
            return nullcontext()
        return _both(self._lock, self.active())

    @property
    def lock(self) -> threading.RLock | None:
        """The process's generator lock its eager calls take (None: one lane, not needed)."""
        return self._lock

    def hand_to(self, target: torch.Generator) -> None:
        """CUDA: set ``target`` (a shared binding's graph-safe state) to this stream's seed and
        Philox offset, so the binding's replays and eager calls draw this session's numbers."""
        target.manual_seed(self._state.initial_seed())
        target.set_offset(self._state.get_offset())

    def take_from(self, target: torch.Generator) -> None:
        """CUDA: this stream continues where ``target`` stands (after a period on it)."""
        self._state.manual_seed(target.initial_seed())
        self._state.set_offset(target.get_offset())

    def offset(self) -> int:
        """Where the stream stands (the Philox offset on CUDA; on the CPU a digest of the
        state), for traces and tests."""
        if self.cuda:
            return int(self._state.get_offset())
        return hash(bytes(self._state.numpy()))


class BindingRng:
    """The generator state of one set of bindings shared by the sessions of a lane.

    A graph registers the generator state installed when it is captured and advances that
    state's Philox offset on every replay. Bindings shared by many sessions are captured under
    this object's own graph-safe state (CUDA); :meth:`serving` hands the running session's seed
    and offset into it before the session's period (``manual_seed``, ``set_offset``) and reads
    the offset back into the session's :class:`SessionRng` after, so each replay, and each eager
    call under :meth:`eager` (the bindings' replay engine's ``eager_guard``), draws the numbers
    the session would draw alone. On the CPU (no graphs; the vocoder's draws are host randomness,
    so its classes run eagerly) :meth:`eager` is the serving session's own ``eager``.
    One lane runs one period at a time, so one binding serves one session at a time.
    """

    def __init__(self, device: torch.device, lock: threading.RLock | None = None) -> None:
        self.device, self._lock = device, lock
        self.cuda = device.type == "cuda"
        self._serving: SessionRng | None = None
        self._state: Any = None
        if self.cuda:
            torch.cuda.init()  # type: ignore[no-untyped-call]
            index = device.index if device.index is not None else torch.cuda.current_device()
            self._generator = torch.cuda.default_generators[index]
            self._state = self._generator.clone_state()

    @property
    def serving_rng(self) -> SessionRng | None:
        """The session whose period (or opening) the bindings run now."""
        return self._serving

    @contextmanager
    def serving(self, rng: SessionRng) -> Iterator[None]:
        """The bindings draw ``rng``'s stream for the span (a period, a warm-up)."""
        if self._serving is not None:
            raise RuntimeError(
                "shared bindings serve one session at a time: a lane runs one period at a time"
            )
        self._serving = rng
        if self.cuda:
            rng.hand_to(self._state)
        try:
            yield
        finally:
            if self.cuda:
                rng.take_from(self._state)
            self._serving = None

    @contextmanager
    def active(self) -> Iterator[None]:
        """The bindings' state installed as the device's default generator (CUDA; the CPU: the
        serving session's state), without the process lock."""
        if self._serving is None:
            raise RuntimeError("shared bindings ran outside a session's span (serving)")
        if not self.cuda:
            with self._serving.active():
                yield
            return
        swapped = self._generator.graphsafe_get_state()
        self._generator.graphsafe_set_state(self._state)
        try:
            yield
        finally:
            self._generator.graphsafe_set_state(swapped)

    def eager(self) -> AbstractContextManager[None]:
        """What an eager call of the shared bindings runs under: CUDA, the process lock (with
        concurrent lanes) and this state installed; the CPU, the serving session's ``eager``."""
        if self._serving is None:
            raise RuntimeError("shared bindings ran outside a session's span (serving)")
        if not self.cuda:
            return self._serving.eager()
        return _both(self._lock if self._lock is not None else nullcontext(), self.active())


@dataclass(frozen=True)
class Capacity:
    """What one process may hold: ``sessions`` as measured for this family and arm on this
    device (None: not measured, only the utilization check applies), ``lanes`` concurrent
    periods, and the share of each period the admitted sessions may fill (one lane)."""

    sessions: int | None = None
    lanes: int = 1
    utilization: float = 0.9
    source: str = "not measured"  # where ``sessions`` comes from, for the refusal's line


@dataclass(frozen=True)
class Done:
    """One period's result: which session, which period, when it was due, started and done
    (``perf_counter`` seconds), its deadline, and the stepper's result (or the error)."""

    session: int
    index: int
    due: float
    started: float
    finished: float
    deadline: float
    result: Any = None
    error: BaseException | None = None

    @property
    def latency_s(self) -> float:
        """From due to done: what a listener waits beyond the period's own length."""
        return self.finished - self.due

    @property
    def late(self) -> bool:
        """Done after its deadline: a dropout where the output is played in real time."""
        return self.finished > self.deadline


@dataclass(eq=False)
class _Session:
    sid: int
    step: Stepper
    rng: SessionRng
    period_s: float
    state_bytes: int
    close: Callable[[], None] | None
    eager_periods: Callable[[Any], bool]  # this period (its input) reads the generator eagerly
    lane: int  # the lane (CUDA stream) its periods run on, for its whole life
    pending: deque[tuple[int, float, Any]] = field(default_factory=deque)
    busy: bool = False
    periods: int = 0
    costs: deque[float] = field(default_factory=lambda: deque(maxlen=200))


class Multiplexer:
    """N sessions of one family on one device; see the module docstring.

    Args:
        device: where the sessions run.
        capacity: what admission holds the process to.
    """

    def __init__(self, device: torch.device | str, capacity: Capacity | None = None) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and self.device.index is None:  # a lane's set_device needs the index
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.capacity = capacity or Capacity()
        self.lanes = self.capacity.lanes
        if self.lanes < 1:
            raise ValueError(f"lanes={self.capacity.lanes}: need at least one")
        self.rng_lock = threading.RLock()
        self._rng_held = threading.Condition(self.rng_lock)  # an opening waits on it for turns
        self._sessions: dict[int, _Session] = {}
        self._ids = itertools.count()
        # Due periods per lane, (deadline, order, sid): a session keeps its lane, so every
        # tensor it allocates and frees is on one stream (the caching allocator reuses a freed
        # block on its stream only, ordered after the work that freed it).
        self._heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(self.lanes)]
        self._order = itertools.count()
        self._cv = threading.Condition()
        self._done: list[Done] = []
        self._running = 0
        self._stop = False
        self._lane_error: BaseException | None = None  # a lane that died outside a period
        self._workers: list[threading.Thread] = []
        # Each lane's capture stream and graph pool, shared by its sessions' replay engines.
        self.graph_lanes = [GraphLane(self.device, i) for i in range(self.lanes)]

    # -- sessions ------------------------------------------------------------------------------

    @property
    def sessions(self) -> tuple[int, ...]:
        return tuple(self._sessions)

    def admit(
        self,
        opener: Callable[[SessionRng], tuple[Stepper, Callable[[], None] | None]],
        *,
        seed: int,
        period_s: float,
        state_bytes: int = 0,
        eager_periods: Callable[[Any], bool] = lambda payload: False,
        cost_s: float | None = None,
    ) -> int:
        """Open a session if the measured capacity holds it; returns its id.

        ``opener(rng)`` builds the session's state and bindings (warm-up and capture included)
        while ``rng`` is installed, beside the other sessions' periods (the module docstring:
        opening beside the others), and returns its stepper and what ends it;
        the session's replay engine takes ``rng.eager`` as its ``eager_guard``.
        ``cost_s``: what one of its periods is expected to cost, for the utilization check
        (default: the admitted sessions' mean). ``eager_periods(payload)``: whether the period
        of that input runs eagerly outside any replay engine (e.g. its arm, after a switch the
        input asks for, does not replay): such a period holds the generator lock throughout, with
        the session's state installed.
        """
        self._check_admission(period_s, state_bytes, cost_s)
        lock = self.rng_lock if self.lanes > 1 else None
        rng = SessionRng(self.device, seed, lock)
        load = [0] * self.lanes
        with self._cv:
            for other in self._sessions.values():
                load[other.lane] += 1
        lane = load.index(min(load))  # the lane with the fewest sessions
        with self._opening(lane), rng.active(), on_lane(self.graph_lanes[lane]):
            step, close = opener(rng)
        with self._cv:
            sid = next(self._ids)
            self._sessions[sid] = _Session(
                sid, step, rng, period_s, state_bytes, close, eager_periods, lane
            )
        return sid

    def close(self, sid: int) -> None:
        """End a session: its pending periods dropped, its state and bindings freed at once."""
        with self._cv:
            while self._sessions[sid].busy:
                self._cv.wait()
            session = self._sessions.pop(sid)
            heap = self._heaps[session.lane]
            heap[:] = [item for item in heap if item[2] != sid]
            heapq.heapify(heap)
        if session.close is not None:
            session.close()
        del session
        if self.cuda:
            gc.collect()  # a replay engine and its operators refer to each other: a cycle
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()

    def rng(self, sid: int) -> SessionRng:
        return self._sessions[sid].rng

    def lane_of(self, sid: int) -> int:
        """The lane (CUDA stream, graph pool) ``sid`` runs on."""
        return self._sessions[sid].lane

    # -- periods -------------------------------------------------------------------------------

    def submit(self, sid: int, payload: Any, *, due: float | None = None) -> int:
        """Queue one period of ``sid`` (due now unless ``due``); returns its index."""
        due = time.perf_counter() if due is None else due
        with self._cv:
            session = self._sessions[sid]
            index = session.periods
            session.periods += 1
            session.pending.append((index, due, payload))
            if len(session.pending) == 1 and not session.busy:
                self._push(session)
            self._cv.notify_all()
        return index

    def drain(self, timeout: float | None = None) -> list[Done]:
        """Run every queued period (earliest deadline first) and return what is done since
        the last drain, in completion order."""
        if not self._workers:
            while True:
                with self._cv:
                    due = [(h[0], lane) for lane, h in enumerate(self._heaps) if h]
                    if not due:
                        break
                    session = self._pop(min(due)[1])
                self._run(session)
        else:
            end = None if timeout is None else time.perf_counter() + timeout
            with self._cv:
                while any(self._heaps) or self._running:
                    if self._lane_error is not None:
                        raise RuntimeError(
                            f"a multiplexer lane stopped: {self._lane_error}"
                        ) from self._lane_error
                    left = None if end is None else end - time.perf_counter()
                    if left is not None and left <= 0:
                        break
                    self._cv.wait(left)
        return self.take_done()

    def take_done(self) -> list[Done]:
        """What is done so far, in completion order (for a caller that polls)."""
        with self._cv:
            done, self._done = self._done, []
        return done

    def start(self) -> None:
        """Start the lanes: from now on periods run as they are submitted, on the lanes' own
        threads; without it ``drain`` runs them on the caller's thread, one at a time."""
        self._start_lanes()

    def shutdown(self) -> None:
        """Stop the lanes (after the queued periods) and close every session."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        for worker in self._workers:
            worker.join()
        self._workers = []
        for sid in list(self._sessions):
            self.close(sid)

    def measured(self) -> dict[int, dict[str, float]]:
        """Each session's recent period cost (p50, p99, seconds) and utilization."""
        with self._cv:  # the lanes append as periods end
            recent = {sid: (s.period_s, list(s.costs)) for sid, s in self._sessions.items()}
        out = {}
        for sid, (period_s, seen) in recent.items():
            if seen:
                costs = np.asarray(seen)
                p99 = float(np.quantile(costs, 0.99))
                out[sid] = {
                    "p50_s": float(np.median(costs)),
                    "p99_s": p99,
                    "utilization": p99 / period_s,
                }
        return out

    # -- internals -----------------------------------------------------------------------------

    def _check_admission(self, period_s: float, state_bytes: int, cost_s: float | None) -> None:
        cap, n = self.capacity, len(self._sessions)
        if cap.sessions is not None and n >= cap.sessions:
            raise AdmissionRefused(
                f"session refused: {n} sessions already fill this process's measured capacity "
                f"({cap.sessions}, {cap.source}); end a session or route it to another replica"
            )
        if self.cuda and state_bytes:
            free = torch.cuda.mem_get_info(self.device)[0]
            if free < state_bytes:
                raise AdmissionRefused(
                    f"session refused: it needs {byte_text(state_bytes, 'MiB', 0)} of state, "
                    f"{byte_text(free, 'MiB', 0)} are free on {self.device}; end a session or "
                    "route it to another replica"
                )
        if self.lanes > 1 or not self._sessions:
            return
        measured = self.measured()
        if not measured:
            return
        load = sum(m["utilization"] for m in measured.values())
        if cost_s is None:
            cost_s = float(np.mean([m["p99_s"] for m in measured.values()]))
        if load + cost_s / period_s > cap.utilization:
            raise AdmissionRefused(
                f"session refused: the {n} admitted sessions use {load:.0%} of each period "
                f"(measured p99) and one more needs {cost_s / period_s:.0%}, over the "
                f"{cap.utilization:.0%} limit; end a session or route it to another replica"
            )

    @contextmanager
    def _opening(self, lane: int) -> Iterator[None]:
        """A session opening on ``lane``: with the generator lock held throughout (its state is
        the default one), beside the periods of every lane, its replays in the lane's turns
        (:meth:`GraphLane.turn`). One lane (whose periods install their session's generator
        state without the lock) waits instead: the opening holds its turn throughout. Its work
        is done on the device before its first period."""
        whole = self.graph_lanes[lane].turn() if self.lanes == 1 else nullcontext()
        switch = sys.getswitchinterval()
        if self._workers:  # the lanes' threads wait for the interpreter less while it opens
            sys.setswitchinterval(min(switch, OPENING_SWITCH_S))
        try:
            with whole, self._rng_held, yielding(self._rng_held):
                yield
        finally:
            sys.setswitchinterval(switch)
            if self.cuda:
                torch.cuda.synchronize(self.device)

    def _push(self, session: _Session) -> None:
        _, due, _ = session.pending[0]
        item = (due + session.period_s, next(self._order), session.sid)
        heapq.heappush(self._heaps[session.lane], item)

    def _pop(self, lane: int) -> _Session:
        _, _, sid = heapq.heappop(self._heaps[lane])
        session = self._sessions[sid]
        session.busy = True
        return session

    def _run(self, session: _Session) -> None:
        """One period of ``session``, in its lane's turn (:meth:`GraphLane.turn`)."""
        with self.graph_lanes[session.lane].turn():
            index, due, payload = session.pending[0]
            started = time.perf_counter()
            result: Any = None
            error: BaseException | None = None
            try:
                with self._period_rng(session, payload):
                    result = session.step(payload)
                if self.cuda:
                    torch.cuda.current_stream(self.device).synchronize()
            except Exception as exc:  # the period fails alone; its session reports it
                error = exc
            finished = time.perf_counter()
            with self._cv:
                session.pending.popleft()
                session.busy = False
                session.costs.append(finished - started)
                self._done.append(
                    Done(session.sid, index, due, started, finished, due + session.period_s, result,
                         error)
                )  # fmt: skip
                if session.pending:
                    self._push(session)
                self._cv.notify_all()

    def _period_rng(self, session: _Session, payload: Any) -> AbstractContextManager[None]:
        if self.lanes == 1:
            return session.rng.active()
        if session.eager_periods(payload):
            return _both(self.rng_lock, session.rng.active())
        return nullcontext()

    def _start_lanes(self) -> None:
        if self._workers:
            return
        self._stop = False
        for lane in range(self.lanes):
            worker = threading.Thread(
                target=self._lane, args=(lane,), name=f"multiplex-lane-{lane}", daemon=True
            )
            worker.start()
            self._workers.append(worker)

    def _lane(self, lane: int) -> None:
        """A lane's thread; if it dies outside a period (a period's own error goes to its
        ``Done``), ``drain`` raises instead of waiting for periods no lane will run."""
        try:
            if not self.cuda:
                self._serve(lane)
                return
            torch.cuda.set_device(self.device)
            with torch.cuda.stream(torch.cuda.Stream(device=self.device)):  # type: ignore[no-untyped-call]
                self._serve(lane)
        except BaseException as error:
            with self._cv:
                self._lane_error = error
                self._cv.notify_all()

    def _serve(self, lane: int) -> None:
        heap = self._heaps[lane]
        while True:
            with self._cv:
                while not self._stop and not heap:
                    self._cv.wait()
                if self._stop and not heap:
                    return
                session = self._pop(lane)
                self._running += 1
            try:
                self._run(session)
            finally:
                with self._cv:
                    self._running -= 1
                    self._cv.notify_all()


@contextmanager
def _both(lock: AbstractContextManager[Any], inner: AbstractContextManager[None]) -> Iterator[None]:
    with lock, inner:
        yield

"""Capacity: how many exact sessions one process holds in real time on one GPU (issue 25).

    python3 bench/capacity.py OUT --family synthetic --levels 16 32 48 64 --lanes 4
    python3 bench/capacity.py OUT --family moshi --levels 4 6 8 10 12 --lanes 4
    python3 bench/capacity.py OUT --family moshi --baseline --levels 2 4   # a process each
    python3 bench/capacity.py OUT --merge PARTS  # PARTS/capacity_*.json -> OUT/capacity_h200.json
    python3 bench/capacity.py OUT --family moshi --levels 8 10 12 --lanes 6 --tag _lanes6
    python3 bench/capacity.py OUT --family synthetic --tiny   # small, CPU: proves the script

Multiplexed (``engine.multiplex``): the family's weights loaded once, sessions admitted one by
one up to each level in ``--levels`` (each warmed up and sealed under its own generator state;
the device memory each admission takes is measured beside the session's declared state), then
``--periods`` periods per session paced in real time: session ``i`` of ``N`` is due at
``t0 + (i/N + k) * period`` (inputs arrive when their period of audio is complete), run
earliest deadline first on ``--lanes`` CUDA streams. A level is held when every period is done
by its deadline (due + one period: later is a dropout) — p50/p99 of due-to-done beside the
period. Every level starts every session's conversation again (reset, generator re-seeded).

Exactness at the last level: every session's outputs (each period's speech, and Moshi's tokens,
as a digest) equal the same session's run alone (reset, re-seeded, its periods one after the
other with no other session running), and for ``--eager-check`` sessions the same session alone
in eager, over the first ``--eager-periods`` periods.

Admission time: each admission's ``open_s`` and its warm-up's ``warmup_s``, with the warm-up's
work (``steps`` driven, ``eager_warmups``, ``lane_probes``: classes a later session on the lane
captured without a probe of its own, ``captures``, ``capture_s``); ``admission_s`` summarizes
the lanes' first sessions apart from the later ones.

Bindings (Token2Wav): one set per (lane, voice) (``--bindings shared``, the default;
``adapters.token2wav.shared``): the first session of a voice on a lane captures the set
(``bindings`` "captured"), a later one captures nothing ("shared": it allocates its state and
copies the reset state in); each admission records ``owned_mib``, what the session alone
holds. ``--bindings session``: per-session bindings on the lane's resources.

Memory: each admission's device bytes (``mem_get_info``) and allocated bytes, with its lane and,
for Token2Wav, its voice and whether the voice was new (a new voice also makes the voice's
prompt-only state, shared by its later sessions); the summary's per-session means leave out
each lane's first session (it also opens the lane's pool and stream caches; on shared bindings,
every session that captured a set), split by known and
new voice; every level records each lane's graph pool (reserved and allocated, ``lane_pools``).

Workloads. Token2Wav (``synthetic``, MiniCPM-o 4.5's decoder): every session speaks every
period (with one of ``--voices`` voices, 0: a voice each), as a speaking MiniCPM-o unit does: a
turn's first period the declaration's period tokens and its lookahead (28), then its period
tokens (25) a period, a barge-in turn end every ``--turn`` periods (the lookahead alone, then a
reset), cut into calls by the declaration's windower; tokens seeded per session and period,
from the declaration's vocabulary. Moshi: the period model
(``MoshiPeriods``) on seeded noise per session, sampling on; odd sessions reset mid-level.

Baseline (``--baseline``): one process per session (each loads the weights and opens one
session), started together, paced the same way; per-process memory from ``mem_get_info``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)  # `moshi` is the package's name

from adapters.face import ModelRequest
from adapters.moshi.family import MOSHI
from adapters.token2wav.family import SYNTHETIC
from app.heap import release_heap, settle_heap
from bench.env_info import environment
from engine.arms import Arm
from engine.multiplex import Capacity, Done, Multiplexer, SessionRng
from engine.sizes import MIB


def _quiet(stage: str, fraction: float) -> None:
    pass


def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, torch.Tensor):
            h.update(part.detach().cpu().contiguous().numpy().tobytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()[:16]


# -- workloads ---------------------------------------------------------------------------------


class Token2WavSession:
    """One speaking Token2Wav session: the declaration's windower into the decoder; on shared
    bindings (``shared``) each period runs inside the session's ``period`` (its state copied
    into its lane's bindings and out after)."""

    def __init__(self, speech: Any, shared: Any = None) -> None:
        self.shared = shared
        if shared is None:
            self.speech, self.windower = speech.speech, speech.windower
        else:
            self.speech, self.windower = None, shared.windower

    def step(self, payload: tuple[torch.Tensor, bool]) -> str:
        if self.shared is None:
            return self._step(self.speech, payload)
        with self.shared.period() as speech:
            return self._step(speech, payload)

    def _step(self, speech: Any, payload: tuple[torch.Tensor, bool]) -> str:
        tokens, turn_end = payload
        pcm = []
        for call in self.windower.push(tokens, turn_end):
            pcm.append(speech.push(call.tokens, call.last_chunk))
            if call.last_chunk:
                speech.reset()
        return _digest(*pcm)

    def reset(self) -> None:
        self.windower.reset()
        if self.shared is None:
            self.speech.reset()
            return
        with self.shared.period() as speech:
            speech.reset()

    def owned_bytes(self) -> int | None:
        """What the session alone holds of the decoder's state (shared bindings only)."""
        return None if self.shared is None else int(self.shared.owned_bytes())


class Token2WavLoad:
    key = "synthetic"

    def __init__(self, request: ModelRequest, turn: int, voices: int, shared: bool) -> None:
        self.source = SYNTHETIC.load_sessions(request, _quiet)
        self.period_s, self.turn, self.device = self.source.period_s, turn, request.device
        self.voices = voices  # 0: every session its own voice
        self.shared = shared  # one set of bindings per (lane, voice), else per session

    def state_bytes(self, arm: Arm) -> int:
        return int(self.source.state_bytes(arm))

    def voice(self, seed: int) -> int:
        """The seed of the voice session ``seed`` speaks with (sessions are 1000, 1001, ...)."""
        return seed if self.voices == 0 else 1000 + (seed - 1000) % self.voices

    def open(self, seed: int, arm: Arm, rng: SessionRng | None) -> tuple[Any, Any, dict[str, Any]]:
        guard = rng.eager if rng is not None else None
        voice = self.voice(seed)
        if arm.replay and self.shared and rng is not None:
            held = self.source.voices_held()
            shared, warmup = self.source.open_shared(seed, arm, rng, voice=voice)
            info = {"voice": voice, "new_voice": self.source.voices_held() > held, **warmup}
            return Token2WavSession(None, shared), shared.close, info
        if arm.replay:
            held = self.source.voices_held()
            speech, warmup = self.source.open_speech(seed, arm, guard, voice=voice)
            info = {"voice": voice, "new_voice": self.source.voices_held() > held, **warmup}
        else:  # alone in eager: no warm-up, the stream from its start
            speech = self.source.speech(self.source.voice(voice), arm, guard)
            info = {"voice": voice}
        return Token2WavSession(speech), None, info

    def payloads(self, seed: int, periods: int) -> list[Any]:
        values = self.source.declaration.values()
        period, first = values["period_tokens"], values["period_tokens"] + values["lookahead"]
        out = []
        for k in range(periods):
            g = torch.Generator().manual_seed(seed * 100_003 + k)
            j = k % self.turn
            n = 0 if j == self.turn - 1 else first if j == 0 else period
            tokens = torch.randint(0, values["vocab"], (1, n), generator=g, dtype=torch.int32)
            out.append((tokens.to(self.device), j == self.turn - 1))
        return out


class MoshiSession:
    def __init__(self, loaded: Any) -> None:
        self.loaded, self.model = loaded, loaded.model

    def owned_bytes(self) -> int:
        """Bytes of every tensor the session's stream keeps (rings, convolution tails,
        positions, flags and small constants, the frame's regions, each once:
        ``MoshiStream.held_bytes``), before the allocator's rounding (512-byte blocks)."""
        return sum(self.model.stream.held_bytes().values())

    def step(self, payload: tuple[bool, np.ndarray]) -> str:
        reset, mic = payload
        if reset:
            self.model.reset()
        out = self.model.step(mic)
        return _digest(out.facts["tokens"], *out.audio)

    def reset(self) -> None:
        self.model.reset()


class MoshiLoad:
    key = "moshi"

    def __init__(self, request: ModelRequest, turn: int, voices: int, shared: bool) -> None:
        self.source = MOSHI.load_sessions(request, _quiet)
        self.period_s = self.source.period_s
        self.spf = round(self.period_s * self.source.input_rate)

    def state_bytes(self, arm: Arm) -> int:
        return int(self.source.state_bytes(arm))

    def open(self, seed: int, arm: Arm, rng: SessionRng | None) -> tuple[Any, Any, dict[str, Any]]:
        guard = rng.eager if rng is not None else None
        loaded = self.source.open(seed, arm, guard, only_own_arm=True)
        return MoshiSession(loaded), loaded.close, dict(loaded.warmup or {})

    def payloads(self, seed: int, periods: int) -> list[Any]:
        g = np.random.default_rng(seed + 100)
        frames = [
            ((0.05 + 0.3 * (i % 7 < 4)) * g.standard_normal(self.spf)).astype(np.float32)
            for i in range(24)
        ]
        return [(seed % 2 == 1 and k == periods // 2, frames[k % 24]) for k in range(periods)]


LOADS = {"synthetic": Token2WavLoad, "moshi": MoshiLoad}
# The levels a run sweeps unless told (bench/run_gpu.sh's parts name theirs).
LEVELS = {"synthetic": [16, 32, 48, 64], "moshi": [4, 6, 8, 10, 12]}


# -- the multiplexed run -----------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _memory(device: torch.device) -> tuple[int, int]:
    """(device bytes in use by anyone, bytes this process's allocator holds allocated)."""
    if device.type != "cuda":
        return 0, 0
    _sync(device)
    free, total = torch.cuda.mem_get_info(device)
    return total - free, torch.cuda.memory_allocated(device)


def _paced(
    mux: Multiplexer, plan: list[tuple[float, int, Any]], device: torch.device
) -> list[Done]:
    """Submit each period at its due time (``perf_counter``), then wait for them all."""
    done: list[Done] = []
    lanes = mux.lanes > 1 or device.type == "cuda"
    for due, sid, payload in plan:
        while (left := due - time.perf_counter()) > 0:
            time.sleep(min(left, 0.002))
        mux.submit(sid, payload, due=due)
        if not lanes:
            done += mux.drain()
    done += mux.drain()
    return done


def _stats(done: list[Done], period_s: float) -> dict[str, Any]:
    lat = np.array([d.latency_s for d in done]) * 1e3
    cost = np.array([d.finished - d.started for d in done]) * 1e3
    late = sum(d.late for d in done)
    errors = [repr(d.error) for d in done if d.error is not None]
    return {
        "periods": len(done),
        "latency_p50_ms": round(float(np.median(lat)), 2),
        "latency_p99_ms": round(float(np.quantile(lat, 0.99)), 2),
        "latency_max_ms": round(float(lat.max()), 2),
        "period_cost_p50_ms": round(float(np.median(cost)), 2),
        "period_cost_p99_ms": round(float(np.quantile(cost, 0.99)), 2),
        "budget_ms": round(period_s * 1e3, 2),
        "late": int(late),
        "errors": errors[:3],
        "held": bool(late == 0 and not errors and np.quantile(lat, 0.99) <= period_s * 1e3),
    }


Save = Callable[[dict[str, Any]], None]


def multiplexed(
    args: argparse.Namespace, load: Any, device: torch.device, save: Save
) -> dict[str, Any]:
    """The level sweep; ``save`` gets the result so far after every level (a run cut short by
    its time limit still leaves its numbers)."""
    arm = Arm.parse(args.arm)
    # Measuring capacity: admission by utilization off (the count is what this finds).
    mux = Multiplexer(device, Capacity(lanes=args.lanes, utilization=float("inf")))
    period = load.period_s
    sessions: dict[int, tuple[int, Any]] = {}  # sid -> (seed, session)
    admissions: list[dict[str, Any]] = []
    levels: list[dict[str, Any]] = []
    last: dict[int, tuple[list[Any], list[str]]] = {}
    if mux.lanes > 1 or device.type == "cuda":
        mux.start()
    t_start = time.perf_counter()
    for level in args.levels:
        # What the next admissions are expected to take: on shared bindings a later session's
        # (an allocation and a copy), else the mean of all so far.
        later = [a["open_s"] for a in admissions if a.get("bindings") == "shared"]
        opening = np.mean(later or [a["open_s"] for a in admissions]) if admissions else 0.0
        needed = opening * (level - len(sessions)) + (args.periods + 1) * period
        if time.perf_counter() - t_start + needed > args.budget_s:
            levels.append({"sessions": level, "skipped": f"would end past --budget-s {needed:.0f}"})
            break
        while len(sessions) < level:
            seed = 1000 + len(sessions)
            used0, alloc0 = _memory(device)
            t0 = time.perf_counter()
            sid, holder = _admit(mux, load, arm, seed)
            used1, alloc1 = _memory(device)
            sessions[sid] = (seed, holder["session"])
            info = holder["info"]
            admissions.append(
                {
                    "session": sid,
                    "lane": mux.lane_of(sid),
                    "open_s": round(time.perf_counter() - t0, 3),
                    "device_mib": round((used1 - used0) / MIB, 1),
                    "allocated_mib": round((alloc1 - alloc0) / MIB, 1),
                    **_owned(holder["session"]),
                    **{k: info[k] for k in ("voice", "new_voice", "bindings") if k in info},
                    "warmup_s": info.get("seconds"),
                    # the warm-up's work: calls driven, eager warm-ups (probes), classes that
                    # took their lane's probe, captures and their time
                    **{k: info[k] for k in ("steps", "eager_warmups", "lane_probes") if k in info},
                    "captures": info.get("captures"),
                    "capture_s": info.get("capture_s"),
                    "capture_mib": round(info.get("capture_bytes", 0) / MIB, 1),
                }
            )
        _restart(mux, sessions)
        n = len(sessions)
        work = {sid: load.payloads(seed, args.periods) for sid, (seed, _) in sessions.items()}
        settle_heap()  # as converse --sessions does once its sessions are admitted
        done = _paced(mux, _plan(work, period), device)
        release_heap()  # what closes later (the exact check's sessions) is collected again
        stats = _stats(done, period)
        used, _ = _memory(device)
        levels.append(
            {
                "sessions": n,
                **stats,
                "device_used_mib": round(used / MIB),
                "lanes": mux.lanes,
                "lane_pools": _pools(mux),
            }
        )
        print(json.dumps(levels[-1]), flush=True)
        ordered = sorted(done, key=lambda d: d.index)
        last = {
            sid: (work[sid], [d.result for d in ordered if d.session == sid]) for sid in sessions
        }
        if n == args.open_during and stats["held"]:
            levels[-1]["opened_during"] = _open_during(mux, load, arm, sessions, work, last, device)
            print(json.dumps(levels[-1]["opened_during"]), flush=True)
        save(_summary(arm, mux.lanes, period, load, admissions, levels, None))
        if not stats["held"] and not args.keep_going:
            break
    exact = check_exact(args, load, mux, sessions, last, device, arm)
    mux.shutdown()
    return _summary(arm, mux.lanes, period, load, admissions, levels, exact)


def _restart(mux: Multiplexer, sessions: dict[int, tuple[int, Any]]) -> None:
    """Every conversation starts again: its state reset, its random stream from its seed."""
    for sid, (_, session) in sessions.items():
        session.reset()
        mux.rng(sid).reseed()


def _plan(work: dict[int, list[Any]], period: float) -> list[tuple[float, int, Any]]:
    """Each session's payloads due one period apart from 0.2 s on, the sessions spread evenly
    over a period; ordered by due time."""
    t0, n = time.perf_counter() + 0.2, len(work)
    return sorted(
        (t0 + (i / n + k) * period, sid, p)
        for i, (sid, payloads) in enumerate(work.items())
        for k, p in enumerate(payloads)
    )


def _admit(mux: Multiplexer, load: Any, arm: Arm, seed: int) -> tuple[int, dict[str, Any]]:
    """Admit session ``seed``; its session object and warm-up record in the returned holder."""
    holder: dict[str, Any] = {}

    def opener(rng: SessionRng) -> Any:
        session, close, info = load.open(seed, arm, rng)
        holder["session"], holder["info"] = session, info
        return session.step, close

    return mux.admit(opener, seed=seed, period_s=load.period_s, state_bytes=0), holder


def _open_during(
    mux: Multiplexer,
    load: Any,
    arm: Arm,
    sessions: dict[int, tuple[int, Any]],
    work: dict[int, list[Any]],
    last: dict[int, tuple[list[Any], list[str]]],
    device: torch.device,
) -> dict[str, Any]:
    """The level's conversations again (reset, the same inputs) while another thread admits one
    more session a second in and closes it a second after it is open: the periods due while it
    opened and closed, whether any was late, and whether every conversation said exactly what
    it said in the level's own run."""
    period, n = load.period_s, len(sessions)
    _restart(mux, sessions)
    marks: dict[str, float] = {}
    failed: list[str] = []

    def visitor() -> None:
        try:
            time.sleep(1.0)
            marks["admit"] = time.perf_counter()
            sid, _ = _admit(mux, load, arm, 1000 + n + 100)
            marks["open"] = time.perf_counter()
            time.sleep(1.0)
            marks["close"] = time.perf_counter()
            mux.close(sid)
            marks["closed"] = time.perf_counter()
        except Exception as exc:  # said in the result, beside what the others did
            failed.append(repr(exc))

    thread = threading.Thread(target=visitor, name="capacity-visitor")
    settle_heap()
    plan = _plan(work, period)
    thread.start()
    done = _paced(mux, plan, device)
    thread.join()
    release_heap()
    ordered = sorted(done, key=lambda d: d.index)
    equal = sum([d.result for d in ordered if d.session == sid] == last[sid][1] for sid in sessions)
    spans = {"opening": ("admit", "open"), "closing": ("close", "closed")}
    out: dict[str, Any] = {
        "late": sum(d.late for d in done),
        "periods": len(done),
        "equal_to_the_level_run": f"{equal} of {n}",
    }
    if failed or len(marks) < 4:
        return out | {"error": failed[0] if failed else "the run ended first", "held": False}
    out["open_s"] = round(marks["open"] - marks["admit"], 3)
    out["close_s"] = round(marks["closed"] - marks["close"], 3)
    for name, (a, b) in spans.items():
        inside = [d for d in done if marks[a] <= d.due <= marks[b] + period]
        lat = [d.latency_s * 1e3 for d in inside]
        out[name] = {
            "periods_due": len(inside),
            "late": sum(d.late for d in inside),
            "latency_max_ms": round(max(lat), 2) if lat else None,
        }
    out["held"] = out["late"] == 0 and equal == n
    return out


def _owned(session: Any) -> dict[str, float]:
    """The MiB of state the session alone holds (Token2Wav on shared bindings; Moshi: its
    streaming states)."""
    owned = getattr(session, "owned_bytes", lambda: None)()
    return {} if owned is None else {"owned_mib": round(owned / MIB, 3), "owned_bytes": owned}


def _pools(mux: Multiplexer) -> list[dict[str, Any]]:
    """Each lane's graph pool (reserved and allocated MiB) and its sessions."""
    if not mux.cuda:
        return []
    counts = [0] * mux.lanes
    for sid in mux.sessions:
        counts[mux.lane_of(sid)] += 1
    out = []
    for lane, n in zip(mux.graph_lanes, counts, strict=True):
        pool = lane.pool_bytes()
        out.append(
            {
                "lane": lane.index,
                "sessions": n,
                "pool_reserved_mib": round(pool["reserved"] / MIB, 1),
                "pool_allocated_mib": round(pool["allocated"] / MIB, 1),
            }
        )
    return out


def _mean_mib(rows: list[dict[str, Any]]) -> dict[str, float] | None:
    if not rows:
        return None
    per = [a["device_mib"] for a in rows]
    return {"sessions": len(per), "mean": round(float(np.mean(per)), 1), "max": max(per)}


def _mean_of(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [a[key] for a in rows if a.get(key) is not None]
    return round(float(np.mean(values)), 3) if values else None


def _summary(
    arm: Arm,
    lanes: int,
    period: float,
    load: Any,
    admissions: list[dict[str, Any]],
    levels: list[dict[str, Any]],
    exact: dict[str, Any] | None,
) -> dict[str, Any]:
    # The first session on each lane also opens the lane's pool and stream caches; a session
    # whose voice is new also makes the voice's prompt-only state (shared by later ones). On
    # shared bindings, the sessions that captured them (the first of a voice on a lane: the
    # bindings' working state, graphs and executables) are set apart the same way.
    if any("bindings" in a for a in admissions):
        extra = [a for a in admissions if a.get("bindings") == "shared"]
    else:
        first = {}
        for a in admissions:
            first.setdefault(a.get("lane"), a["session"])
        extra = [a for a in admissions if a["session"] not in first.values()]
    shared = [a for a in admissions if a.get("bindings") in ("captured", "shared")]
    return {
        "arm": str(arm),
        "lanes": lanes,
        "period_ms": round(period * 1e3, 2),
        "declared_state_mib": round(load.state_bytes(arm) / MIB, 3),
        "per_session_device_mib": _mean_mib(extra) or _mean_mib(admissions),
        "per_session_device_mib_known_voice": _mean_mib(
            [a for a in extra if a.get("new_voice") is False]
        ),
        "per_session_device_mib_new_voice": _mean_mib([a for a in extra if a.get("new_voice")]),
        "per_session_allocated_mib": _mean_of(extra, "allocated_mib"),
        "per_session_owned_mib": _mean_of(extra, "owned_mib"),
        "owned_within_declared": all(  # to the byte: MiB to one decimal once hid 0.03 MiB
            a["owned_bytes"] <= load.state_bytes(arm) for a in admissions if "owned_bytes" in a
        ),
        "bindings": (
            {
                "mode": "one set per (lane, voice)",
                "sets": sum(a["bindings"] == "captured" for a in shared),
                "sessions_on_shared": len(extra),
            }
            if shared
            else {"mode": "per session"}
        ),
        "admission_s": {
            "lane_first": _mean_of([a for a in admissions if a not in extra], "open_s"),
            "later": _mean_of(extra, "open_s"),
            "later_max": max((a["open_s"] for a in extra), default=None),
        },
        "admissions": admissions,
        "levels": levels,
        "max_held": max((lv["sessions"] for lv in levels if lv.get("held")), default=0),
        "exact": exact if exact is not None else "not checked yet (run cut short)",
    }


def check_exact(
    args: argparse.Namespace,
    load: Any,
    mux: Multiplexer,
    sessions: dict[int, tuple[int, Any]],
    last: dict[int, tuple[list[Any], list[str]]],
    device: torch.device,
    arm: Arm,
) -> dict[str, Any]:
    """Each session of the last level against itself alone, and some against eager alone."""
    alone_equal = 0
    first_bad: list[str] = []
    for sid, (payloads, got) in last.items():
        _, session = sessions[sid]
        session.reset()
        rng = mux.rng(sid)
        rng.reseed()
        with mux.rng_lock, rng.active():
            mine = [session.step(p) for p in payloads]
        _sync(device)
        if mine == got:
            alone_equal += 1
        elif len(first_bad) < 3:
            k = next(i for i, (a, b) in enumerate(zip(mine, got, strict=False)) if a != b)
            first_bad.append(f"session {sid} period {k}")
    eager_equal, eager_checked = 0, 0
    # The first session (its lane's first: it probed its classes) and the last ones (later on
    # their lanes: captured without a probe of their own) against eager alone.
    ids = list(last)
    picks = ids[:1] + ids[1:][-(args.eager_check - 1) :] if args.eager_check > 1 else ids[:1]
    for sid in picks[: args.eager_check]:
        seed, _ = sessions[sid]
        payloads, got = last[sid]
        periods = min(args.eager_periods, len(payloads))
        rng = SessionRng(device, seed)
        with mux.rng_lock, rng.active():
            session, close, _ = load.open(seed, Arm.EAGER, None)
            torch.manual_seed(seed)
            mine = [session.step(p) for p in payloads[:periods]]
        if close is not None:
            close()
        eager_checked += 1
        eager_equal += mine == got[:periods]
        if mine != got[:periods] and len(first_bad) < 6:
            first_bad.append(f"session {sid} differs from eager alone")
    return {
        "sessions": len(last),
        "alone_equal": alone_equal,
        "eager_checked": eager_checked,
        "eager_sessions": picks[: args.eager_check],
        "eager_equal": eager_equal,
        "eager_periods": args.eager_periods,
        "first_differences": first_bad,
        "all_exact": alone_equal == len(last) and eager_equal == eager_checked,
    }


# -- the one-process-per-session baseline ------------------------------------------------------


def child(args: argparse.Namespace, load: Any, device: torch.device) -> None:
    """One session alone in this process, paced from the parent's start signal."""
    arm = Arm.parse(args.arm)
    rng = SessionRng(device, args.seed)
    with rng.active():
        session, _, _ = load.open(args.seed, arm, rng)
    payloads = load.payloads(args.seed, args.periods)
    used, _ = _memory(device)
    reserved = torch.cuda.memory_reserved(device) if device.type == "cuda" else 0
    Path(args.child, "ready").with_suffix(f".{args.seed}").write_text("1")
    go = Path(args.child, "go")
    while not go.exists():
        time.sleep(0.01)
    start = float(go.read_text()) + args.phase * load.period_s
    rows = []
    with rng.active():
        for k, payload in enumerate(payloads):
            due = start + k * load.period_s
            while (left := due - time.time()) > 0:
                time.sleep(min(left, 0.002))
            t = time.time()
            session.step(payload)
            _sync(device)
            rows.append((due, t, time.time()))
    lat = [f - d for d, _, f in rows]
    late = sum(f > d + load.period_s for d, _, f in rows)
    # the device's memory in use by every process when this one was ready, and what this
    # process's allocator holds (weights, state, graphs; its CUDA context not counted)
    out = {
        "latency_s": lat,
        "late": late,
        "process_device_mib": round(used / MIB),
        "process_reserved_mib": round(reserved / MIB),
    }
    Path(args.child, f"result.{args.seed}.json").write_text(json.dumps(out))


def baseline(args: argparse.Namespace, load_key: str, save: Save) -> dict[str, Any]:
    import tempfile

    levels = []
    for n in args.levels:
        folder = Path(tempfile.mkdtemp(prefix="capacity-"))
        procs = []
        for i in range(n):
            cmd = [
                sys.executable, __file__, str(args.out), "--family", load_key, "--arm", args.arm,
                "--child", str(folder), "--seed", str(1000 + i), "--phase", str(i / n),
                "--periods", str(args.periods),
            ] + (["--tiny"] if args.tiny else [])  # fmt: skip
            procs.append(subprocess.Popen(cmd, env=os.environ.copy()))
        t0 = time.perf_counter()
        while len(list(folder.glob("ready.*"))) < n:
            if any(p.poll() not in (None, 0) for p in procs) or time.perf_counter() - t0 > 240:
                break
            time.sleep(0.1)
        ready = len(list(folder.glob("ready.*")))
        (folder / "go.tmp").write_text(str(time.time() + 0.5))
        (folder / "go.tmp").rename(folder / "go")  # whole, never half written
        for p in procs:
            try:
                p.wait(timeout=300)
            except subprocess.TimeoutExpired:
                p.kill()
        results = [json.loads(f.read_text()) for f in folder.glob("result.*.json")]
        lat = np.array([x for r in results for x in r["latency_s"]]) * 1e3
        row: dict[str, Any] = {"sessions": n, "ready": ready, "finished": len(results)}
        if lat.size:
            late = sum(r["late"] for r in results)
            row |= {
                "latency_p50_ms": round(float(np.median(lat)), 2),
                "latency_p99_ms": round(float(np.quantile(lat, 0.99)), 2),
                "late": int(late),
                "process_device_mib": [r["process_device_mib"] for r in results],
                "process_reserved_mib": [r.get("process_reserved_mib") for r in results],
                "held": late == 0 and len(results) == n,
            }
        levels.append(row)
        print(json.dumps(row), flush=True)
        save({"arm": args.arm, "levels": levels})
        if not row.get("held"):
            break
    return {"arm": args.arm, "levels": levels}


# -- main --------------------------------------------------------------------------------------


def _write(out: Path, name: str, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(result, indent=2) + "\n")


def merge(out: Path, parts_dir: Path) -> None:
    """``parts_dir``'s capacity_*.json (one per family and baseline) into OUT's one file, over
    the parts it already holds (so two runs' folders merge one after the other)."""
    merged = out / "capacity_h200.json"
    parts = json.loads(merged.read_text()) if merged.exists() else {}
    for f in sorted(parts_dir.glob("capacity_*.json")):
        if f.name != "capacity_h200.json":
            parts[f.stem.removeprefix("capacity_")] = json.loads(f.read_text())
    out.mkdir(parents=True, exist_ok=True)
    merged.write_text(json.dumps(parts, indent=2) + "\n")
    print(f"wrote {merged}: {', '.join(parts)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--family", choices=sorted(LOADS))
    parser.add_argument("--levels", type=int, nargs="+", default=None, help=f"default {LEVELS}")
    parser.add_argument("--lanes", type=int, default=4, help="concurrent CUDA streams")
    parser.add_argument("--arm", default="SRc")
    parser.add_argument("--periods", type=int, default=None, help="per session and level")
    parser.add_argument("--turn", type=int, default=6, help="Token2Wav: periods per turn")
    parser.add_argument("--eager-check", type=int, default=2, help="sessions checked vs eager")
    parser.add_argument("--eager-periods", type=int, default=12)
    parser.add_argument("--budget-s", type=float, default=400.0, help="no new level after it")
    parser.add_argument("--keep-going", action="store_true", help="past a level not held")
    parser.add_argument("--baseline", action="store_true", help="one process per session")
    parser.add_argument("--merge", metavar="PARTS", type=Path, help="merge PARTS/*.json into OUT")
    parser.add_argument("--voices", type=int, default=0, help="Token2Wav: voices (0: one each)")
    parser.add_argument(
        "--bindings",
        choices=("shared", "session"),
        default="shared",
        help="Token2Wav: one set of bindings per (lane, voice) (default), or per session",
    )
    parser.add_argument("--tiny", action="store_true", help="the small config on the CPU")
    parser.add_argument(
        "--open-during",
        type=int,
        default=0,
        metavar="N",
        help="at the level of N sessions, once held: run it again while one more session "
        "opens and closes beside it (0: not)",
    )
    parser.add_argument("--tag", default="", help="suffix of the result's name (another sweep)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--phase", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.merge:
        merge(args.out, args.merge)
        return
    if args.family is None:
        parser.error("--family is required (synthetic or moshi), or --merge")
    if args.levels is None:
        args.levels = [2] if args.tiny else LEVELS[args.family]
    device = torch.device("cpu" if args.tiny else "cuda")
    if args.periods is None:
        args.periods = 12 if args.family == "synthetic" else 100
    request = ModelRequest(
        device=str(device),
        model_size="small" if args.tiny else "full",
        arm=Arm.parse(args.arm),
        seed=0,
        n_steps=2 if args.tiny else None,
    )
    if args.baseline and args.child is None:
        name = f"capacity_{args.family}_baseline{args.tag}.json"
        env = {"environment": environment(" ".join(sys.argv))}
        result = env | baseline(args, args.family, lambda r: _write(args.out, name, env | r))
    else:
        t0 = time.perf_counter()
        load = LOADS[args.family](request, args.turn, args.voices, args.bindings == "shared")
        if args.child is not None:
            child(args, load, device)
            return
        name = f"capacity_{args.family}{args.tag}.json"
        head = {
            "environment": environment(" ".join(sys.argv)),
            "family": args.family,
            "load_s": round(time.perf_counter() - t0, 2),
            "weights_device_mib": round(_memory(device)[1] / MIB),
        }
        partial = lambda r: _write(args.out, name, head | r)  # noqa: E731
        result = {**head, **multiplexed(args, load, device, partial)}
    _write(args.out, name, result)
    print(f"wrote {args.out / name}")
    gc.collect()


if __name__ == "__main__":
    main()

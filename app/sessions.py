"""``converse --headless --sessions N``: N conversations in one process, on one set of weights.

The family's weights load once (``adapters.face.session_source``); each conversation is a
:class:`~app.session.Session` of its own (its state, voice, arm, replay engine, generator
stream, trace), admitted to one :class:`~engine.multiplex.Multiplexer`, whose earliest-deadline
scheduler steps every session's due period. Session ``i`` has seed ``seed + i`` (its backbone
and its random stream; the weights are the seed's); every session speaks the run's voice (the
recording, or the random voice of ``seed``), as one assistant does. Session ``i`` has its own
files: a name with ``{i}`` is each session's
(``--input talk{i}.wav`` reads ``talk0.wav``, ``talk1.wav``, ...); an input without it is heard by
every session; an output or trace without it gets ``.i`` before its suffix (``out.0.wav``).
Files on a simulated clock, period ``k`` of every session due at ``k`` periods; each session runs
until its input ends and its answer is over, as one conversation does.

How a session holds its replay bindings is the family's choice (``SessionSource.bindings``,
``open_multiplexed``): Token2Wav's sessions share one set per lane and voice (the first session
captures it, a later one captures nothing and brings only its state), Moshi's each capture their
own. Each session's summary line says which, in words (``bindings``), and its trace header's
``warmup`` what its admission did (``bindings``, ``captures``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from app.converse import (
    ConverseError,
    ConverseRequest,
    Tally,
    _answer_pending,
    _finish,
    _load_progress,
    _outputs,
    _sink,
    _source,
    check_request,
)
from app.heap import settle_heap
from app.outputs import claim_outputs
from app.session import Session

__all__ = ["bindings_words", "converse_sessions", "session_request"]


def session_request(req: ConverseRequest, i: int) -> ConverseRequest:
    """Session ``i``'s request: its seed and its files (see the module docstring)."""

    def own(path: Path | None, shared: bool) -> Path | None:
        if path is None:
            return None
        if "{i}" in path.name:
            return path.with_name(path.name.replace("{i}", str(i)))
        return path if shared else path.with_name(f"{path.stem}.{i}{path.suffix}")

    settings = replace(req.settings, seed=req.settings.seed + i)
    return replace(
        req,
        settings=settings,
        input=own(req.input, shared=True),
        output=own(req.output, shared=False),
        trace=own(req.trace, shared=False),
        sessions=1,
    )


def converse_sessions(req: ConverseRequest) -> dict[str, Any]:
    """Run ``req.sessions`` conversations; returns the summary printed on stdout."""
    if req.use_devices or req.input is None or req.output is None:
        raise ConverseError(
            f"--sessions {req.sessions} runs on files (one audio device carries one "
            "conversation): give --input and --output, with {i} in a name for each session's"
        )
    if req.record_audio is not None:
        raise ConverseError("--record-audio records one conversation: leave it out with --sessions")
    subs = [session_request(req, i) for i in range(req.sessions)]
    names = [s.output for s in subs]
    if len(set(names)) < len(names):
        raise ConverseError("--output names one file for every session: put {i} in its name")
    for sub in subs:
        check_request(sub)
    outputs = [output for sub in subs for output in _outputs(sub)]
    with claim_outputs(outputs, force=req.force):  # a second run is refused before loading
        return _converse_sessions(req, subs)


def _converse_sessions(req: ConverseRequest, subs: list[ConverseRequest]) -> dict[str, Any]:
    from adapters.face import FamilyError, session_source
    from adapters.registry import family
    from app.session import open_session
    from engine.multiplex import Multiplexer, SessionRng

    if not req.verbose:
        logging.getLogger("duplexcadence.replay").setLevel(logging.ERROR)
    settings = req.settings
    request = settings.model_request(n_steps=req.n_steps, realtime=req.realtime)
    progress = _load_progress(req.progress) or (lambda stage, fraction: None)
    mux = Multiplexer(request.device)
    sessions: dict[int, tuple[ConverseRequest, Session]] = {}
    try:
        source = session_source(family(settings.family), request, progress)
        for sub in subs:
            opened: list[Session] = []

            def opener(rng: SessionRng, sub: ConverseRequest = sub, opened: Any = opened) -> Any:
                loaded = source.open_multiplexed(
                    sub.settings.seed, sub.settings.arm, rng, voice=settings.seed
                )
                session = open_session(loaded, sub.settings, trace=sub.jsonl, fresh=True)
                opened.append(session)
                return session.step, None

            sid = mux.admit(
                opener,
                seed=sub.settings.seed,
                period_s=source.period_s,
                state_bytes=source.state_bytes(sub.settings.arm),
                eager_periods=_arm_is_eager(opened),
            )
            sessions[sid] = (sub, opened[0])
    except FamilyError as error:
        raise ConverseError(str(error)) from None
    tallies = {sid: Tally() for sid in sessions}
    # Every session is admitted (weights, twins, graphs): collect once and freeze the survivors,
    # so no full collection walks them mid-period (100-350 ms with the GIL held: late periods).
    settle_heap()
    with ExitStack() as stack:
        for _, session in sessions.values():
            stack.callback(session.close)
        _run(mux, sessions, tallies, stack)
    mux.shutdown()
    summaries = [
        {**_finish(sub, session, tallies[sid]), "bindings": bindings_words(session.warmup)}
        for sid, (sub, session) in sessions.items()
    ]
    way = {"model": source.title, "device": request.device, "bindings": source.bindings}
    return {"sessions": summaries, **way}


_BINDINGS = {
    "captured": "shared bindings (one set per lane and voice, each session's state copied in "
    "and out around its period): this session captured them at its admission ({captures} graphs)",
    "shared": "shared bindings (one set per lane and voice, each session's state copied in and "
    "out around its period): on the set an earlier session captured; this admission captured "
    "nothing",
    "per-session": "per-session bindings: this session captured its own at its admission "
    "({captures} graphs)",
}


def bindings_words(warmup: dict[str, Any]) -> str:
    """How a session holds its replay bindings, from its admission's record, in words."""
    way = str(warmup.get("bindings", "per-session"))
    return _BINDINGS[way].format(captures=warmup.get("captures", 0))


def _arm_is_eager(opened: list[Session]) -> Callable[[Any], bool]:
    """Whether a session's next period runs its arm eagerly (the generator held throughout)."""
    return lambda mic: not opened[0].arm.replay


def _run(
    mux: Any,
    sessions: dict[int, tuple[ConverseRequest, Session]],
    tallies: dict[int, Tally],
    stack: ExitStack,
) -> None:
    """Every session's periods, due together, until each one's input and answer are over."""
    sources, sinks, drained = {}, {}, dict.fromkeys(sessions, 0)
    for sid, (sub, session) in sessions.items():
        sources[sid] = _source(sub, session.input_rate, stack)
        sinks[sid] = _sink(sub, session.output_rate, stack)
    live = set(sessions)
    k = 0
    while live:
        for sid in sorted(live):
            sub, session = sessions[sid]
            n_in = round(session.period_s * session.input_rate)
            mic = sources[sid].read_period(n_in, timeout=2 * session.period_s)
            tally = tallies[sid]
            if sub.seconds is not None and tally.periods >= sub.seconds:
                live.discard(sid)
                continue
            if mic is None:  # its input ended: silence until its answer is over
                if sub.seconds is None and not _answer_pending(session, tally, drained[sid]):
                    live.discard(sid)
                    continue
                mic, drained[sid] = np.zeros(n_in, np.float32), drained[sid] + 1
            mux.submit(sid, mic, due=k * session.period_s)
        for done in mux.drain():
            if done.error is not None:
                raise done.error
            sinks[done.session].write(done.result.pcm)
            tallies[done.session].add(done.result)
        k += 1

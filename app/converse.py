"""``duplexcadence converse --headless``: the app's conversation loop on files or audio devices.

The same :class:`~app.session.Session` the desktop app drives, fed from a WAV (or the input
device) one native period at a time, its output written to a WAV (or played on the output
device). With files the clock is simulated (periods run back to back) unless ``--realtime``
paces the input to the wall clock; devices are real time by nature. After a file ends the loop
keeps listening to silence until the assistant's turn is over (at most ``DRAIN_S``), so an
answer to the last words is not cut; ``--seconds N`` runs exactly N periods instead.

Outputs: the JSONL trace (one fsynced line per period, beside ``--trace`` with ``.jsonl``),
exported at the end to Perfetto JSON (``--trace``) and CSV (same stem, ``.csv``), and, where the
family says text (a recognizer for the user's side, words for the assistant's), the transcript
``<stem>.transcript.txt`` (:func:`app.transcript.write_beside`, as the desktop app writes it); with
``--record-audio DIR`` the two channels as ``DIR/mic.wav`` (the model's input rate) and
``DIR/assistant.wav`` (its output rate), period-aligned. A summary JSON goes to stdout, progress
to stderr.

Nothing is lost, nothing clobbered: every output is checked before the models load
(:func:`app.outputs.check_outputs`: not the input, not an existing file without ``--force``,
room on the disk, not another run's) and claimed for the run (:func:`app.outputs.claim_outputs`:
a second run naming one is refused before loading), and the input is scanned for NaN; the WAVs
and the JSONL are written period by period (a killed run leaves them playable and readable;
``duplexcadence export`` rebuilds the Perfetto/CSV); a run that fails leaves the earlier files
of the same names as they were, while Ctrl-C or SIGTERM ends it like the end of the input: a
period is written whole or not at all (its trace line, its audio, its recordings:
``app.interrupts``), and so is the closing of each output; an interrupt during the exports
leaves them to ``duplexcadence export``. Memory stays flat in the session's length: the input is
streamed, the summary is tallied period by period, and the exports stream the JSONL
(``bench/long_session.py`` measures a 2-hour input).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from app.heap import settle_heap
from app.interrupts import WholeExitStack, interrupts_deferred, stopped_by
from app.outputs import OutputsError, check_outputs, claim_outputs, run_bytes
from app.periods import PeriodSink, PeriodSource, WavSink, WavSource, check_input, check_wav_path
from app.progress import PeriodBar
from app.response import ResponseMeter, response_facts
from app.settings import Settings
from app.transcript import Transcript, audio_time, transcript_path, write_beside
from engine.arms import Arm
from engine.cadence import percentile
from engine.duplex import PeriodOutcome, Phase
from engine.trace import TraceWriter, check_trace_path

if TYPE_CHECKING:  # both import torch: only once the request passed its checks
    from app.audio.devices import DeviceLost
    from app.session import Session
    from engine.duplex import PeriodOutcome

__all__ = [
    "DRAIN_S",
    "ConverseError",
    "ConverseRequest",
    "Tally",
    "check_request",
    "converse",
    "request_from_args",
    "summarize",
]

DRAIN_S = 15.0  # at most this many seconds of silence after the input ends, to finish an answer


class ConverseError(ValueError):
    """A request the command cannot serve; the message names the fix."""


@dataclass(frozen=True)
class ConverseRequest:
    """One headless conversation; validated by :func:`check_request` before anything loads."""

    settings: Settings
    input: Path | None = None  # a sound file; None = the input device
    output: Path | None = None  # a .wav; None = the output device
    trace: Path | None = None  # Perfetto .json (the JSONL and CSV sit beside it)
    realtime: bool = False
    use_devices: bool = False
    record_audio: Path | None = None
    seconds: int | None = None
    n_steps: int | None = None  # solver steps override (tests)
    progress: bool = True
    verbose: bool = False  # replay captures/rejections logged on stderr too
    force: bool = False  # replace existing outputs (when the run does not fail)
    sessions: int = 1  # > 1: app.sessions runs them, in one process on one set of weights

    @property
    def jsonl(self) -> Path | None:
        return self.trace.with_suffix(".jsonl") if self.trace is not None else None


def check_request(req: ConverseRequest) -> None:
    """Fail before loading anything, with the fix in the message."""
    if req.sessions < 1:
        raise ConverseError(f"--sessions {req.sessions}: run at least one conversation")
    if req.input is None and not req.use_devices:
        raise ConverseError("give --input FILE.wav, or --input-device NAME for a microphone")
    if req.input is not None and not req.input.is_file():
        raise ConverseError(f"--input {req.input} does not exist: pass a WAV file")
    if req.output is None and not req.use_devices:
        raise ConverseError("give --output FILE.wav, or --output-device NAME for a speaker")
    try:
        if req.output is not None:
            check_wav_path(req.output)
        if req.trace is not None:
            if req.trace.suffix.lower() != ".json":
                raise ConverseError(
                    f"--trace {req.trace}: give a .json path (the Perfetto trace; the JSONL "
                    f"and CSV are written beside it as {req.trace.stem}.jsonl/.csv)"
                )
            check_trace_path(req.trace.with_suffix(".jsonl"), overwrite=True)
    except ValueError as error:  # TraceError and path errors are ValueErrors
        raise ConverseError(str(error)) from None
    if req.record_audio is not None and not req.record_audio.parent.is_dir():
        parent = req.record_audio.parent
        raise ConverseError(
            f"--record-audio {req.record_audio}: folder {parent} does not exist: mkdir -p {parent}"
        )
    if req.record_audio is not None and req.record_audio.exists() and not req.record_audio.is_dir():
        raise ConverseError(f"--record-audio {req.record_audio} is a file: name a folder")
    if req.seconds is not None and req.seconds < 1:
        raise ConverseError(f"--seconds {req.seconds}: run at least one period")
    seconds: float | None = req.seconds
    if req.input is not None:
        try:
            duration = check_input(req.input)
        except (ValueError, OSError) as error:
            raise ConverseError(str(error)) from None
        seconds = seconds if seconds is not None else duration + DRAIN_S
    outputs = _outputs(req)
    wavs = sum(path.suffix == ".wav" for _, path in outputs)
    try:
        check_outputs(
            outputs,
            inputs=[("--input", req.input)] if req.input is not None else [],
            force=req.force,
            bytes_needed=run_bytes(seconds, wavs, req.trace is not None),
        )
    except OutputsError as error:
        raise ConverseError(str(error)) from None


def _outputs(req: ConverseRequest) -> list[tuple[str, Path]]:
    """Every file the run writes, with the option that names it."""
    outputs = [("--output", req.output)] if req.output is not None else []
    if req.trace is not None:
        outputs += [("--trace", req.trace.with_suffix(s)) for s in (".jsonl", ".json", ".csv")]
        outputs.append(("--trace", transcript_path(req.trace)))
    if req.record_audio is not None and req.record_audio.is_dir():
        outputs += [("--record-audio", req.record_audio / n) for n in ("mic.wav", "assistant.wav")]
    return outputs


def converse(req: ConverseRequest) -> dict[str, Any]:
    """Run the conversation; returns the summary printed on stdout."""
    check_request(req)  # before torch loads: a refused request answers at once
    with claim_outputs(_outputs(req), force=req.force):  # a second run is refused before loading
        return _converse_claimed(req)


def _converse_claimed(req: ConverseRequest) -> dict[str, Any]:
    from app.session import build_session

    if not req.verbose:  # every replay decision is in the trace; stderr keeps the progress bar
        logging.getLogger("duplexcadence.replay").setLevel(logging.ERROR)
    try:
        session = build_session(
            req.settings,
            trace=req.jsonl,
            progress=_load_progress(req.progress),
            n_steps=req.n_steps,
            realtime=req.input is None or req.realtime,  # devices and paced files keep a clock
        )
    except KeyboardInterrupt:
        if req.progress:
            sys.stderr.write("\n")  # ends the loading line: "interrupted" gets its own
        raise
    tally = Tally()
    try:
        audio, nonfinite, lost = _converse(session, req, tally)
        summary = _finish(req, session, tally)
    except KeyboardInterrupt:  # while closing or exporting: what was written is whole
        if req.jsonl is not None:
            print(
                f"duplexcadence converse: interrupted before the exports: {req.jsonl} is whole; "
                f"`duplexcadence export {req.jsonl}` writes the Perfetto, CSV and transcript "
                "files",
                file=sys.stderr,
            )
        raise
    if nonfinite:
        print(
            f"duplexcadence converse: warning: the model produced {nonfinite} NaN or infinite "
            "samples, written as silence (broken weights?)",
            file=sys.stderr,
        )
    if lost is not None:  # the outputs are whole and exported: now the one line
        raise lost
    return {**summary, **audio, "nonfinite_samples": nonfinite}


def _converse(
    session: Session, req: ConverseRequest, tally: Tally
) -> tuple[dict[str, Any], int, DeviceLost | None]:
    """Open the audio and the outputs, run the periods, close everything; returns the device
    statistics, the count of non-finite samples the model made and the loss of a device, if
    one ended the conversation. Ctrl-C or SIGTERM ends the periods like the end of the input,
    and so does a lost device (its line comes once the outputs are written); the outputs are
    opened and closed whole (an interrupt then comes after)."""
    from app.audio.devices import DeviceLost
    from app.audio.stream import DeviceStream

    lost: DeviceLost | None = None
    with WholeExitStack() as stack:
        stack.callback(session.close)
        _keep_on_success(stack, session.trace)  # runs first: a failed run aborts the trace
        settle_heap()  # the main thread owns collection: weights, graphs, warm-up, then freeze
        source = _source(req, session.input_rate, stack)
        with interrupts_deferred():  # each output opened and in the stack, or none
            sink = _sink(req, session.output_rate, stack)
            recorders = _recorders(req, session.input_rate, session.output_rate, stack)
        if req.settings.echo_cancel:
            from app.audio import cancel_playback_echo

            cancel_playback_echo(source, sink)
        total = _expected_periods(req, source, session)
        bar = PeriodBar("converse", total) if req.progress else None
        stopped = None
        try:
            _run(session, source, sink, recorders, tally, req, bar)
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the end of the conversation
            stopped = stopped_by(stop)
            if bar is not None:
                bar.interrupted(stopped)
        except DeviceLost as error:  # a device stopped: the end of the conversation too
            lost = error
            for end in (source, sink):  # the other device's server is likely gone as well
                if isinstance(end, DeviceStream):
                    end.close(wait=False)
            if bar is not None:
                bar.close()
        else:
            if bar is not None:
                bar.close()
        stats = {**_device_stats(source=source, sink=sink), "stopped_by": stopped}
    return stats, getattr(sink, "nonfinite", 0), lost


def _keep_on_success(stack: ExitStack, output: WavSink | TraceWriter | None) -> None:
    """At the stack's exit: keep ``output`` (close) unless the run failed (abort: an earlier
    file of the same name stays). Ctrl-C and SIGTERM end a run; they are no failure."""
    if output is None:
        return

    def finish(
        exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc_type is None or issubclass(exc_type, KeyboardInterrupt):
            output.close()
        else:
            output.abort()
        return False

    stack.push(finish)


class Tally:
    """The run's summary, counted period by period (the outcomes themselves are not kept)."""

    def __init__(self) -> None:
        self.periods = self.speaking = self.turns = self.barge_ins = 0
        self.calls = self.over_budget = 0
        self.times_ms: list[float] = []  # one float per period: 58 KB for two hours
        self.arms: set[str] = set()
        self.said: list[str] = []  # what the assistant said, period by period (text families)
        self.heard: list[str] = []  # what the user said, utterance by utterance (recognizers)
        self.responses_ms: list[float] = []  # each answer's response latency (devices only)
        self.transcript = Transcript()  # both sides, for <trace>.transcript.txt
        self.last: PeriodOutcome | None = None

    def add(self, outcome: PeriodOutcome) -> None:
        record = outcome.record
        self.periods += 1
        self.speaking += outcome.phase is Phase.SPEAK
        self.turns += sum(c.kind == "flush" for c in outcome.calls)
        self.barge_ins += bool(record.loop.get("barge_in"))
        self.calls += len(outcome.calls)
        self.over_budget += bool(record.over_budget)
        self.times_ms.append(record.processing_s * 1e3)
        if "response_ms" in record.loop:
            self.responses_ms.append(record.loop["response_ms"])
        self.arms.add(record.arm)
        if outcome.heard:
            self.heard.append(outcome.heard)
        if outcome.text:
            self.said.append(outcome.text)
        if outcome.heard or outcome.text:
            at = audio_time(record.index, record.period_s)
            self.transcript.add_period(at, outcome.heard, outcome.text)
        self.last = outcome


def _run(
    session: Session,
    source: PeriodSource,
    sink: PeriodSink,
    recorders: tuple[WavSink, WavSink] | None,
    tally: Tally,
    req: ConverseRequest,
    bar: PeriodBar | None,
) -> None:
    n_in = round(session.period_s * session.input_rate)
    silence, drained = np.zeros(n_in, np.float32), 0
    meter = _response_meter(source, sink, session)
    while req.seconds is None or tally.periods < req.seconds:
        mic = source.read_period(n_in, timeout=2 * session.period_s)
        if mic is None:  # the input ended: listen to silence until the answer is over
            if req.seconds is None and not _answer_pending(session, tally, drained):
                break
            mic, drained = silence, drained + 1
        facts: dict[str, Any] = {}
        if meter is not None:
            meter.heard(mic if session.hears else silence)
            facts = response_facts(meter.poll(), meter.by)
        with interrupts_deferred():  # the period's trace line, audio and recordings, or none
            outcome = session.step(mic, facts)
            if outcome.record.loop.get("barge_in") and hasattr(sink, "interrupt"):
                sink.interrupt()  # a device sink drops what it still queues, fading out
            if meter is not None:
                meter.played(outcome.pcm)
            sink.write(outcome.pcm)
            if recorders is not None:
                recorders[0].write(mic)
                recorders[1].write(outcome.pcm)
            tally.add(outcome)
        if bar is not None:
            ms = outcome.record.processing_s * 1e3
            bar.update(f"{ms:6.0f} ms {outcome.phase.value:6} arm {outcome.record.arm}")


def _response_meter(
    source: PeriodSource, sink: PeriodSink, session: Session
) -> ResponseMeter | None:
    """The response latency's meter when both ends are devices (a file has no room to time)."""
    from app.audio import DeviceSink, DeviceSource

    if isinstance(source, DeviceSource) and isinstance(sink, DeviceSink):
        return ResponseMeter(source, sink, session.input_rate, session.output_rate)
    return None


def _answer_pending(session: Session, tally: Tally, drained: int) -> bool:
    if drained * session.period_s >= DRAIN_S or tally.last is None:
        return False
    return bool(tally.last.phase is Phase.SPEAK or session.in_turn)


def _source(req: ConverseRequest, rate: int, stack: ExitStack) -> PeriodSource:
    if req.input is not None:
        try:
            source = WavSource(req.input, rate, realtime=req.realtime)
        except (FileNotFoundError, ValueError) as error:
            raise ConverseError(str(error)) from None
        stack.callback(source.close)
        return source
    from app.audio import DeviceSource

    settings = req.settings
    device = DeviceSource(settings.input_device, rate=rate, host_api=settings.host_api)
    return stack.enter_context(device)  # started now, closed when the conversation ends


def _sink(req: ConverseRequest, rate: int, stack: ExitStack) -> PeriodSink:
    if req.output is not None:
        wav = WavSink(req.output, rate, overwrite=req.force)
        _keep_on_success(stack, wav)
        return wav
    from app.audio import DeviceSink

    settings = req.settings
    device = DeviceSink(settings.output_device, rate=rate, host_api=settings.host_api)
    return stack.enter_context(device)


def _recorders(
    req: ConverseRequest, input_rate: int, output_rate: int, stack: ExitStack
) -> tuple[WavSink, WavSink] | None:
    if req.record_audio is None:
        return None
    req.record_audio.mkdir(exist_ok=True)
    mic = WavSink(req.record_audio / "mic.wav", input_rate, overwrite=req.force)
    _keep_on_success(stack, mic)
    assistant = WavSink(req.record_audio / "assistant.wav", output_rate, overwrite=req.force)
    _keep_on_success(stack, assistant)
    return mic, assistant


def _device_stats(**streams: object) -> dict[str, Any]:
    """Over/underflow counters of the audio devices used (``app.audio`` streams have stats)."""
    stats = {}
    for name, stream in streams.items():
        found = getattr(stream, "stats", None)
        if found is not None and dataclasses.is_dataclass(found):
            stats[name] = dataclasses.asdict(found)  # type: ignore[arg-type]
    return {"audio": stats} if stats else {}


def _expected_periods(req: ConverseRequest, source: PeriodSource, session: Session) -> int | None:
    """Periods the bar counts to: ``--seconds``, else the file's (a drain may add a few)."""
    if req.seconds is not None:
        return req.seconds
    if isinstance(source, WavSource):
        return source.periods(round(session.period_s * session.input_rate))
    return None


def _finish(req: ConverseRequest, session: Session, tally: Tally) -> dict[str, Any]:
    from engine.trace_export import export_csv, export_perfetto

    files: dict[str, str] = {}
    if req.trace is not None and req.jsonl is not None:  # names checked before the run
        if req.progress:
            print(f"converse: exporting {req.trace} and its .csv", file=sys.stderr, flush=True)
        files["jsonl"] = str(req.jsonl)
        files["perfetto"] = str(export_perfetto(req.jsonl, req.trace))
        files["csv"] = str(export_csv(req.jsonl, req.trace.with_suffix(".csv")))
        said = write_beside(tally.transcript, req.trace, overwrite=req.force)
        if said is not None:
            files["transcript"] = str(said)
    if req.output is not None:
        files["output"] = str(req.output)
    if req.record_audio is not None:
        files["record_audio"] = str(req.record_audio)
    return {**files, **summarize(tally), "model": session.model_name, "device": session.device}


def summarize(tally: Tally) -> dict[str, Any]:
    """Cadence and conversation counts over a run (what the command prints); the percentiles
    are :func:`engine.cadence.percentile`'s, as the live panel's."""
    times = sorted(tally.times_ms)
    return {
        "periods": tally.periods,
        "speaking_periods": tally.speaking,
        "turns": tally.turns,
        "barge_ins": tally.barge_ins,
        "calls": tally.calls,
        "over_budget": tally.over_budget,
        "p50_ms": round(percentile(times, 0.5), 2) if times else 0.0,
        "p95_ms": round(percentile(times, 0.95), 2) if times else 0.0,
        "max_ms": round(times[-1], 2) if times else 0.0,
        "arms": sorted(tally.arms),
        **({"response_ms": tally.responses_ms} if tally.responses_ms else {}),
        **({"heard": " / ".join(tally.heard)} if tally.heard else {}),
        **({"said": "".join(tally.said).strip()} if tally.said else {}),
    }


def _load_progress(show: bool) -> Callable[[str, float], None] | None:
    if not show:
        return None

    def report(stage: str, fraction: float) -> None:
        sys.stderr.write(f"\r{stage} {fraction:4.0%}")
        if fraction >= 1.0:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return report


def request_from_args(args: argparse.Namespace) -> ConverseRequest:
    """The request the ``converse`` subcommand's arguments describe (settings file + flags)."""
    from app.settings import fall_back, load_settings

    if args.settings is not None and not args.settings.is_file():
        raise ConverseError(f"--settings {args.settings} does not exist: give a settings YAML")
    base = load_settings(args.settings) if args.settings else Settings()
    changes: dict[str, Any] = {"seed": args.seed if args.seed is not None else base.seed}
    for key in ("family", "model_size", "device", "input_device", "output_device", "host_api"):
        value = getattr(args, key)
        if value is not None:
            changes[key] = value
    if args.arm is not None:
        changes["arm"] = Arm.parse(args.arm)
    if args.checkpoint is not None:
        changes["checkpoint"] = args.checkpoint
    if args.trust_checkpoint_code:
        changes["trust_checkpoint_code"] = True
    if args.voice is not None:
        changes["voice"] = Path(args.voice).expanduser()
    if args.role is not None:
        changes["role"] = args.role
    settings = Settings(**{**base.__dict__, **changes})
    Settings.from_dict(settings.to_dict())  # validate the flags like a settings file
    if args.family is None:  # the default, not a choice: it may fall back (one line says why)
        settings, line = fall_back(settings)
        if line is not None:
            print(f"duplexcadence converse: {line}", file=sys.stderr)
    devices = args.input_device is not None or args.output_device is not None
    return ConverseRequest(
        settings=settings,
        input=args.input,
        output=args.output,
        trace=args.trace,
        realtime=args.realtime,
        use_devices=devices,
        record_audio=args.record_audio,
        seconds=args.seconds,
        progress=not args.quiet,
        verbose=args.verbose,
        force=args.force,
        sessions=args.sessions,
    )

"""The ``duplexcadence`` command line.

Each subcommand is one ``_add_<name>`` function that registers its arguments and one
``_run_<name>`` function that does the work and returns the exit status; add a subcommand by
writing both and listing the adder in :data:`SUBCOMMANDS`.

Exit status: 0 on success, 1 when a declaration is invalid, 2 on a usage error (including a
declaration file that does not exist), 70 on an unexpected internal error (a bug: one line; set
``DUPLEXCADENCE_DEBUG=1`` for the traceback), 74 when the operating system refused a file (its
own words: "No space left on device"), 130 when interrupted (Ctrl-C), 143 when terminated
(SIGTERM). SIGTERM raises :class:`app.interrupts.Terminated`, a ``KeyboardInterrupt``, so a
stopped run closes its files as on Ctrl-C; a conversation it ends still writes its summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from adapters.face import voice_seconds
from adapters.registry import DEFAULT_FAMILY, FALLBACK_FAMILY, family, family_keys
from app.interrupts import Terminated
from app.plan_report import render_plan
from engine.contract import DeclarationError, DeclarationNotFound
from engine.declaration_io import load_declaration
from engine.expr import MAX_LITERAL
from engine.plan import make_plan, plan_as_dict

if TYPE_CHECKING:
    from engine.arms import Arm

FAMILY_HELP = (
    f"model family (default: settings, else {DEFAULT_FAMILY}, the CPU voice that needs no "
    f"checkpoint; {FALLBACK_FAMILY}: seeded random weights, for tests and benchmarks): "
    + ", ".join(family_keys())
)
EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 70, 130
EXIT_OS, EXIT_TERMINATED = 74, 143  # sysexits' EX_IOERR; 128 + SIGTERM, as a shell reports it
DEBUG_ENV = "DUPLEXCADENCE_DEBUG"  # set it to see the traceback of an unexpected error


def _add_plan(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="print the plan a declaration implies (extents, catalogs, K, ρ, memory per arm)",
        description="Derive the plan of a declaration before any traffic (paper Table 3).",
    )
    parser.add_argument(
        "declaration", help="a shipped declaration name (e.g. minicpmo45_token2wav) or a YAML path"
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--walk", action="store_true", help="with --json, include the declared stream's walk"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="override an operating-point integer (repeatable), e.g. --set f_call=50",
    )
    parser.set_defaults(run=_run_plan)


def _run_plan(args: argparse.Namespace) -> int:
    overrides = _parse_overrides(args.overrides)
    declaration = load_declaration(args.declaration)
    unknown = sorted(set(overrides) - set(declaration.operating_point))
    if unknown:
        known = ", ".join(declaration.operating_point)
        raise _UsageError(
            f"--set {unknown[0]}: not an operating-point name; expected one of {known}"
        )
    try:
        plan = make_plan(declaration, overrides)
    except DeclarationError as error:
        if not overrides:
            raise
        make_plan(declaration)  # the declaration alone plans: the --set values are at fault
        given = " ".join(f"{name}={value}" for name, value in overrides.items())
        raise _UsageError(f"--set {given}: {error}") from None
    if args.json:
        print(json.dumps(plan_as_dict(plan, with_walk=args.walk), indent=2, ensure_ascii=False))
    else:
        print(render_plan(plan), end="")
    return EXIT_OK


def _parse_overrides(items: Sequence[str]) -> dict[str, int]:
    overrides: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise _UsageError(f"--set {item!r}: expected NAME=INTEGER, e.g. --set f_call=50")
        digits = value.strip().lstrip("-").lstrip("0")
        if len(digits) > len(str(MAX_LITERAL)):  # before int(): 5000 digits are no size
            raise _UsageError(
                f"--set {name.strip()}: {len(digits):,} digits, over the bound {MAX_LITERAL:.0e}"
            )
        overrides[name.strip()] = int(value)
    return overrides


def _windows(key: str) -> tuple[int, int, float, float]:
    """A Token2Wav family's window and stride (tokens), the stride's seconds and its output rate
    (kHz), from its declaration: the help says what the declaration says."""
    declaration = load_declaration(family(key).declaration)
    values = declaration.values()
    stride = values["stride_tokens"]
    seconds = stride / declaration.clock_rate("token", values)
    khz = declaration.clock_rate("sample", values) / 1000
    return values["tokens_per_call"], stride, seconds, khz


def _voice_seconds(key: str) -> tuple[float, float]:
    """The shortest and longest voice recording family ``key`` takes (its face says)."""
    seconds = voice_seconds(family(key))
    assert seconds is not None, f"family {key} takes a voice recording"
    return seconds


def _add_synth(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    window, stride, seconds, khz = _windows("synthetic")
    lychee_window, lychee_stride, _, _ = _windows("lycheefd")
    shortest, longest = _voice_seconds("synthetic")
    _, lychee_longest = _voice_seconds("lycheefd")
    parser = subparsers.add_parser(
        "synth",
        help="stream speech tokens through Token2Wav under an arm; write a WAV and a trace",
        description=(
            f"Headless Token2Wav: one {window}-token window every {seconds:g} s through the flow "
            "and the HiFT vocoder under the chosen arm. Without --checkpoint the weights are "
            "seeded random and the audio is not speech."
        ),
    )
    voice = parser.add_mutually_exclusive_group(required=True)
    voice.add_argument("--voice-frames", type=int, metavar="P", help="a random voice of P frames")
    voice.add_argument(
        "--prompt-wav",
        type=Path,
        metavar="F",
        help=f"the voice of a recording ({shortest:g} to {longest:.2f} s, Lychee-FD's to "
        f"{lychee_longest:.2f} s; needs --checkpoint with its ONNX models)",
    )
    parser.add_argument("--seconds", type=int, default=10, help="seconds of audio (default 10)")
    parser.add_argument("--arm", default="SRc", help="eager, S, R, Rc, SR or SRc (default SRc)")
    parser.add_argument("--checkpoint", type=Path, help="a token2wav folder (flow.yaml, ...)")
    parser.add_argument("--wav", type=Path, required=True, help=f"output audio (.wav, {khz:g} kHz)")
    parser.add_argument(
        "--force", action="store_true",
        help="replace existing output files (only once the run ends without failing)",
    )  # fmt: skip
    parser.add_argument("--trace", type=Path, help="output Perfetto trace (.json)")
    parser.add_argument(
        "--device",
        type=_device,
        default=None,
        help="cuda, cuda:N or cpu (default: cuda if present)",
    )
    parser.add_argument("--seed", type=_seed, default=0, help="0 to 2^62 (default 0)")
    parser.add_argument(
        "--verbose", action="store_true", help="log replay and audit decisions on stderr"
    )
    parser.add_argument(
        "--family", default="synthetic", choices=("synthetic", "lycheefd"),
        help=f"whose decoder: MiniCPM-o 4.5's ({window}/{stride} windows) or Lychee-FD's "
        f"({lychee_window}/{lychee_stride})",
    )  # fmt: skip
    parser.set_defaults(run=_run_synth)


def _seed(text: str) -> int:
    """``--seed``: an integer from 0 to 2^62 (argparse turns the error into one usage line)."""
    from app.settings import MAX_SEED

    digits = text.strip().removeprefix("-")
    if not digits.isdigit() or len(digits) > 19 or not 0 <= int(text) <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text[:24]!r}: give a non-negative integer up to 2^62")
    return int(text)


def _device(text: str) -> str:
    """``--device``: cpu, cuda or cuda:N (argparse turns the ValueError into one usage line)."""
    if text == "cpu" or text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a device: give cpu, cuda or cuda:N")


def _run_synth(args: argparse.Namespace) -> int:
    arm = _arm(args.arm)  # before torch loads: a typo costs no time
    from app.synth import SynthRequest, load_error, synthesize  # torch only when synthesizing

    if not args.verbose:  # the engine's decisions are in the trace; stderr keeps the progress
        for name in ("duplexcadence.replay", "duplexcadence.audit"):
            logging.getLogger(name).setLevel(logging.ERROR)

    try:
        request = SynthRequest(
            voice_frames=args.voice_frames,
            prompt_wav=args.prompt_wav,
            seconds=args.seconds,
            arm=arm,
            wav=args.wav,
            force=args.force,
            trace=args.trace,
            checkpoint=args.checkpoint,
            seed=args.seed,
            family=args.family,
            **({"device": args.device} if args.device else {}),
        )
        summary = synthesize(request)
    except OSError as error:
        if _os_refused(error):
            return _os_failed("synth", error)
        print(load_error(error), file=sys.stderr)
        return EXIT_USAGE
    except ValueError as error:  # bad request, output, checkpoint or voice prompt
        print(load_error(error), file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as error:  # the run itself failed (e.g. the model produced NaN)
        print(f"duplexcadence synth: failed: {_one_line(error)}", file=sys.stderr)
        return EXIT_INTERNAL
    print(json.dumps({"wav": str(args.wav), "trace": str(args.trace), **summary}))
    return EXIT_OK


def _add_converse(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "converse",
        help="run the full-duplex conversation loop headless, on WAV files or audio devices",
        description=(
            "The app's conversation loop without a window: one native period at a time from "
            "--input (or the input device) to --output (or the output device), a trace per "
            "period. Simulated clock on files unless --realtime. Without --checkpoint the "
            "weights are seeded random and the assistant's audio is not speech."
        ),
    )
    parser.add_argument(
        "--headless", action="store_true", help="no window (required: the window is `gui`)"
    )
    parser.add_argument("--input", type=Path, metavar="WAV", help="the user's side (any rate)")
    parser.add_argument(
        "--output", type=Path, metavar="WAV", help="the assistant (at the model's output rate)"
    )
    parser.add_argument(
        "--trace", type=Path, metavar="JSON",
        help="Perfetto trace (.json); the JSONL (per period) and CSV are written beside it",
    )  # fmt: skip
    parser.add_argument("--arm", help="eager, S, R, Rc, SR or SRc (default: settings, SRc)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), help="compute device")
    parser.add_argument(
        "--model-size", choices=("auto", "full", "small"),
        help="full (the released sizes) or small (real time on a CPU); auto: full on CUDA",
    )  # fmt: skip
    parser.add_argument(
        "--family", choices=family_keys(), help=FAMILY_HELP,
    )  # fmt: skip
    parser.add_argument("--checkpoint", type=Path, metavar="DIR", help="the family's model folder")
    shortest, longest = _voice_seconds("personaplex")
    parser.add_argument(
        "--voice", metavar="NAME|FILE",
        help="personaplex: a voice of --checkpoint by name (NATF0-3, NATM0-3, VARF0-4, VARM0-4; "
        f"default NATF2), a stored voice (.pt) or a recording ({shortest:g}-{longest:g} s)",
    )  # fmt: skip
    parser.add_argument(
        "--role", metavar="TEXT",
        help="personaplex: the role, a preset's name (assistant, the default; README lists the "
        "others) or free text",
    )  # fmt: skip
    parser.add_argument(
        "--trust-checkpoint-code", action="store_true",
        help="run the model code shipped in --checkpoint (minicpmo45): only for a folder you trust",
    )  # fmt: skip
    parser.add_argument(
        "--realtime", action="store_true",
        help="pace file input to the wall clock (default: a simulated clock, periods back to back)",
    )  # fmt: skip
    parser.add_argument("--input-device", metavar="NAME", help="microphone instead of --input")
    parser.add_argument("--output-device", metavar="NAME", help="speaker instead of --output")
    parser.add_argument("--host-api", metavar="NAME", help="audio host API (ALSA, JACK, ...)")
    parser.add_argument("--record-audio", type=Path, metavar="DIR", help="mic + assistant WAVs")
    parser.add_argument("--seconds", type=int, metavar="N", help="run exactly N periods")
    parser.add_argument(
        "--seed", type=_seed, help="seed of weights, voice and backbone (0 to 2^62)"
    )
    parser.add_argument("--settings", type=Path, metavar="YAML", help="settings file to start from")
    parser.add_argument(
        "--force", action="store_true",
        help="replace existing output files (only once the run ends without failing)",
    )  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--verbose", action="store_true", help="log replay decisions on stderr")
    parser.add_argument(
        "--sessions", type=int, default=1, metavar="N",
        help="N conversations on one set of weights; file names with {i} name each session's",
    )  # fmt: skip
    parser.set_defaults(run=_run_converse)


def _run_converse(args: argparse.Namespace) -> int:
    if not args.headless:
        raise _UsageError(
            "converse runs without a window: pass --headless (the window is `duplexcadence gui`)"
        )
    from app.converse import converse, request_from_args
    from app.sessions import converse_sessions

    try:
        request = request_from_args(args)
        summary = (converse_sessions if request.sessions > 1 else converse)(request)
    except (ValueError, OSError, RuntimeError) as error:
        return _converse_failed("converse", error)
    print(json.dumps(summary))
    return _stopped(summary)


def _converse_failed(command: str, error: Exception) -> int:
    """One line for a conversation that could not run, named by what went wrong."""
    from app.audio.devices import AudioError
    from app.settings import SettingsError

    if isinstance(error, AudioError):  # no device, or the device was lost at start
        print(f"duplexcadence {command}: audio: {error}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(error, OSError) and _os_refused(error):
        return _os_failed(command, error)
    if isinstance(error, RuntimeError):  # not the user's input: the run itself failed
        print(f"duplexcadence {command}: failed: {_one_line(error)}", file=sys.stderr)
        return EXIT_INTERNAL
    # ConverseError, OutputsError, ...; SettingsError also carries the family's checkpoint errors
    kind = "settings" if isinstance(error, SettingsError) else "request"
    print(f"duplexcadence {command}: bad {kind}: {_one_line(error)}", file=sys.stderr)
    return EXIT_USAGE


def _os_refused(error: OSError) -> bool:
    """An error the operating system raised (it carries an errno), not one of ours."""
    from engine.files import OutputError

    return error.errno is not None and not isinstance(error, OutputError)


def _os_failed(command: str, error: OSError) -> int:
    """The operating system's own words, the file it refused, and what to do."""
    where = f" ({error.filename})" if error.filename else ""
    words = error.strerror or os.strerror(error.errno or 0)
    print(
        f"duplexcadence {command}: the operating system refused{where}: {words}",
        file=sys.stderr,
    )
    return EXIT_OS


def _stopped(summary: dict[str, object]) -> int:
    """The exit status of a conversation that ran: 143 if SIGTERM ended it, else 0."""
    if summary.get("stopped_by") == "SIGTERM":
        print("duplexcadence: terminated (SIGTERM); the files are whole", file=sys.stderr)
        return EXIT_TERMINATED
    return EXIT_OK


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _arm(text: str) -> Arm:
    """``--arm``, or a usage error listing the arms."""
    from engine.arms import Arm

    try:
        return Arm.parse(text)
    except ValueError as error:
        raise _UsageError(f"--arm {text!r}: {error}") from None


def _add_demo(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="a headless conversation on the shipped demo talk (no microphone, no window)",
        description=(
            "Runs `converse --headless` on the demo talk (espeak-ng utterances: a question, a "
            "follow-up, an interruption) and writes the talk, the assistant's audio and the "
            "traces (Perfetto JSON, CSV, JSONL) into the user data folder."
        ),
    )
    parser.add_argument(
        "--seconds", type=int, default=30, metavar="N",
        help="N seconds of talk, then the answer to its end (default 30)",
    )  # fmt: skip
    parser.add_argument("--arm", default="SRc", help="eager, S, R, Rc, SR or SRc (default SRc)")
    parser.add_argument("--family", choices=family_keys(), help=FAMILY_HELP)
    parser.add_argument(
        "--device", choices=("auto", "cuda", "cpu"), default="auto",
        help="compute device (default auto: CUDA when present)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, metavar="DIR",
        help="folder for the files (default: the demo folder in the user data folder)",
    )  # fmt: skip
    parser.add_argument(
        "--force", action="store_true", help="replace files already in --out (the default "
        "demo folder is always replaced)",
    )  # fmt: skip
    parser.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    if args.seconds < 1:
        raise _UsageError(f"--seconds {args.seconds}: run at least one period")
    arm = _arm(args.arm)  # before torch loads: a typo costs no time
    from app.converse import ConverseRequest, converse
    from app.demo import RATE, demo_dir, write_talk
    from app.outputs import check_outputs, claim_outputs, run_bytes
    from app.settings import Settings, check_settings, fall_back

    out = args.out or demo_dir()
    force = args.force or args.out is None  # the demo folder is the app's: each run replaces it
    settings = Settings(arm=arm, device=args.device)
    if args.family is not None:
        settings = dataclasses.replace(settings, family=args.family)
    else:  # the default, not a choice: it may fall back (one line says why)
        settings, line = fall_back(settings)
        if line is not None:
            print(f"duplexcadence demo: {line}", file=sys.stderr)
    names = ("talk.wav", "assistant.wav", "trace.json", "trace.jsonl", "trace.csv")
    try:
        check_settings(settings)  # before anything is written
        out.mkdir(parents=True, exist_ok=True)
        talk_bytes = args.seconds * RATE * 2  # the 16-bit talk, then the answer and traces
        outputs = [("--out", out / name) for name in names]
        check_outputs(
            outputs,
            force=force,
            bytes_needed=talk_bytes + run_bytes(args.seconds + 10, 1, traced=True),
        )
        with claim_outputs(outputs, force=force):  # a second demo is refused before the talk
            talk = write_talk(out / "talk.wav", args.seconds)
            request = ConverseRequest(
                settings=settings,
                input=talk,
                output=out / "assistant.wav",
                trace=out / "trace.json",
                force=force,  # the talk's length in any family's periods, then the answer's end
            )
            summary = converse(request)
    except (ValueError, OSError, RuntimeError) as error:
        return _converse_failed("demo", error)
    print(f"demo: files in {out} (open trace.json in ui.perfetto.dev)", file=sys.stderr)
    print(json.dumps(summary))
    return _stopped(summary)


def _add_gui(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subparsers.add_parser(
        "gui",
        help="open the desktop app: converse, switch arms live, watch cadence, export",
        description="The desktop app; `duplexcadence gui --help` lists its options.",
        add_help=False,
    )  # main() hands everything after `gui` to app.gui.launch, which parses it


def _add_export(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "export",
        help="rebuild the Perfetto (.json), CSV and transcript exports of a trace from its JSONL",
        description=(
            "Rebuild TRACE.json (Perfetto), TRACE.csv and, where the model said text, "
            "TRACE.transcript.txt from TRACE.jsonl, e.g. after a run that was killed before it "
            "could write them. The JSONL is durable period by period."
        ),
    )
    parser.add_argument("trace", type=Path, metavar="TRACE.jsonl", help="the per-period trace")
    parser.add_argument(
        "--force", action="store_true", help="replace existing .json/.csv/.transcript.txt files"
    )
    parser.set_defaults(run=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from app.transcript import transcript_from_trace, transcript_path, write_beside
    from engine.files import OutputError, check_output
    from engine.trace import TraceError
    from engine.trace_export import export_csv, export_perfetto

    jsonl: Path = args.trace
    if jsonl.suffix != ".jsonl" or not jsonl.is_file():
        raise _UsageError(f"{jsonl}: give an existing .jsonl trace (written by converse/synth)")
    try:
        transcript = transcript_from_trace(jsonl)
        if transcript.lines():  # refused before the other files are written, not after
            check_output(transcript_path(jsonl), overwrite=args.force)
        perfetto = export_perfetto(jsonl, jsonl.with_suffix(".json"), overwrite=args.force)
        table = export_csv(jsonl, jsonl.with_suffix(".csv"), overwrite=args.force)
        said = write_beside(transcript, jsonl, overwrite=args.force)
    except (TraceError, OutputError) as error:
        print(f"duplexcadence export: {error}", file=sys.stderr)
        return EXIT_USAGE
    files = {"perfetto": str(perfetto), "csv": str(table)}
    print(json.dumps({**files, **({"transcript": str(said)} if said is not None else {})}))
    return EXIT_OK


def _run_gui(argv: list[str]) -> int:
    from app.gui import main as gui_main  # Qt only when a display can show the window

    status: int = gui_main(argv)
    return status


class _UsageError(Exception):
    """A malformed argument that argparse itself cannot check."""


SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    _add_plan,
    _add_synth,
    _add_converse,
    _add_demo,
    _add_export,
    _add_gui,
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="duplexcadence",
        description="DuplexCadence: exact, lean speech synthesis from declared clocks.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``duplexcadence`` console script; returns the exit status."""
    try:
        return _dispatch(sys.argv[1:] if argv is None else argv)
    finally:
        _forget_caught_interrupts()


def _forget_caught_interrupts() -> None:
    """Keep the exit status :func:`main` returns after a Ctrl-C it caught.

    CPython notes a ``KeyboardInterrupt`` that leaves code run by ``exec`` of a string (as
    dataclasses and named tuples define their methods: a Ctrl-C while a module is imported can
    land there) and, caught or not, ends ``python -m app.cli`` by SIGINT at exit instead of
    with the status returned (once in about 25 Ctrl-Cs while loading). Each ``exec`` of a
    string starts by clearing that note."""
    exec("")


def _dispatch(argv: list[str]) -> int:
    if argv[:1] == ["gui"]:
        return _run_gui(argv[1:])
    args = build_parser().parse_args(argv)
    previous = _terminate_like_ctrl_c()
    try:
        status: int = args.run(args)
    except Terminated:
        print("duplexcadence: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("duplexcadence: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except DeclarationNotFound as error:
        print(f"duplexcadence: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except _UsageError as error:
        print(f"duplexcadence: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except DeclarationError as error:
        print(f"duplexcadence: invalid declaration: {error}", file=sys.stderr)
        return EXIT_INVALID
    except Exception as error:  # a bug, not the user's input: one line, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        if isinstance(error, OSError) and _os_refused(error):  # the system's words, not a bug
            return _os_failed(args.command, error)
        print(
            f"duplexcadence {args.command}: internal error: {type(error).__name__}: "
            f"{_one_line(error)} (run again with {DEBUG_ENV}=1 for the traceback, and report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return status


def _terminate_like_ctrl_c() -> signal._HANDLER | None:
    """Make SIGTERM raise :class:`Terminated` (main thread only); returns the old handler."""

    def interrupt(signum: int, frame: object) -> None:
        raise Terminated

    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (an embedding app): leave signals alone
        return None


if __name__ == "__main__":
    sys.exit(main())

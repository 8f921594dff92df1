"""The ``duplexcadence`` command line.

Each subcommand is one ``_add_<name>`` function that registers its arguments and one
``_run_<name>`` function that does the work and returns the exit status; add a subcommand by
writing both and listing the adder in :data:`SUBCOMMANDS`.

Exit status: 0 on success, 1 when a declaration is invalid, 2 on a usage error (including a
declaration file that does not exist).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from adapters.registry import family_keys
from app.plan_report import render_plan
from engine.contract import DeclarationError, DeclarationNotFound, load_declaration
from engine.plan import make_plan, plan_as_dict

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


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
    plan = make_plan(declaration, overrides)
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
        overrides[name.strip()] = int(value)
    return overrides


def _add_synth(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "synth",
        help="stream speech tokens through Token2Wav under an arm; write a WAV and a trace",
        description=(
            "Headless Token2Wav: one 28-token window per second through the flow and the HiFT "
            "vocoder under the chosen arm. Without --checkpoint the weights are seeded random "
            "and the audio is not speech."
        ),
    )
    voice = parser.add_mutually_exclusive_group(required=True)
    voice.add_argument("--voice-frames", type=int, metavar="P", help="a random voice of P frames")
    voice.add_argument(
        "--prompt-wav",
        type=Path,
        metavar="F",
        help="the voice of a recording (1 to 16.88 s; needs --checkpoint with its ONNX models)",
    )
    parser.add_argument("--seconds", type=int, default=10, help="seconds of audio (default 10)")
    parser.add_argument("--arm", default="SRc", help="eager, S, R, Rc, SR or SRc (default SRc)")
    parser.add_argument("--checkpoint", type=Path, help="a token2wav folder (flow.yaml, ...)")
    parser.add_argument("--wav", type=Path, required=True, help="output audio (.wav, 24 kHz)")
    parser.add_argument("--trace", type=Path, help="output Perfetto trace (.json)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--family", default="synthetic", choices=("synthetic", "lycheefd"),
        help="whose decoder: MiniCPM-o 4.5's (28/25 windows) or Lychee-FD's (13/10)",
    )  # fmt: skip
    parser.set_defaults(run=_run_synth)


def _run_synth(args: argparse.Namespace) -> int:
    from app.synth import SynthRequest, load_error, synthesize  # torch only when synthesizing
    from engine.arms import Arm

    try:
        request = SynthRequest(
            voice_frames=args.voice_frames,
            prompt_wav=args.prompt_wav,
            seconds=args.seconds,
            arm=Arm.parse(args.arm),
            wav=args.wav,
            trace=args.trace,
            checkpoint=args.checkpoint,
            seed=args.seed,
            family=args.family,
            **({"device": args.device} if args.device else {}),
        )
        summary = synthesize(request)
    except ValueError as error:  # bad request, checkpoint or voice prompt (all ValueErrors)
        print(load_error(error), file=sys.stderr)
        return EXIT_USAGE
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
    parser.add_argument("--output", type=Path, metavar="WAV", help="the assistant (24 kHz)")
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
        "--family", choices=family_keys(),
        help="model family (default: settings, synthetic): " + ", ".join(family_keys()),
    )  # fmt: skip
    parser.add_argument("--checkpoint", type=Path, metavar="DIR", help="the family's model folder")
    parser.add_argument(
        "--realtime", action="store_true",
        help="pace file input to the wall clock (default: a simulated clock, periods back to back)",
    )  # fmt: skip
    parser.add_argument("--input-device", metavar="NAME", help="microphone instead of --input")
    parser.add_argument("--output-device", metavar="NAME", help="speaker instead of --output")
    parser.add_argument("--host-api", metavar="NAME", help="audio host API (ALSA, JACK, ...)")
    parser.add_argument("--record-audio", type=Path, metavar="DIR", help="mic + assistant WAVs")
    parser.add_argument("--seconds", type=int, metavar="N", help="run exactly N periods")
    parser.add_argument("--seed", type=int, help="seed of weights, voice and backbone")
    parser.add_argument("--settings", type=Path, metavar="YAML", help="settings file to start from")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--verbose", action="store_true", help="log replay decisions on stderr")
    parser.set_defaults(run=_run_converse)


def _run_converse(args: argparse.Namespace) -> int:
    if not args.headless:
        raise _UsageError(
            "converse runs without a window: pass --headless (the window is `duplexcadence gui`)"
        )
    from app.converse import converse, request_from_args
    from app.settings import SettingsError

    try:
        summary = converse(request_from_args(args))
    except (ValueError, OSError) as error:  # ConverseError, SettingsError (the family's too), ...
        kind = "settings" if isinstance(error, SettingsError) else "request"
        print(f"duplexcadence converse: bad {kind}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as error:  # app.audio.AudioError (no device, device lost at start)
        print(f"duplexcadence converse: audio: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(summary))
    return EXIT_OK


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
        "--seconds", type=int, default=30, metavar="N", help="run N one-second periods (default 30)"
    )
    parser.add_argument("--arm", default="SRc", help="eager, S, R, Rc, SR or SRc (default SRc)")
    parser.add_argument(
        "--device", choices=("auto", "cuda", "cpu"), default="auto",
        help="compute device (default auto: CUDA when present)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, metavar="DIR",
        help="folder for the files (default: the demo folder in the user data folder)",
    )  # fmt: skip
    parser.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from app.converse import ConverseRequest, converse
    from app.demo import demo_dir, write_talk
    from app.settings import Settings
    from engine.arms import Arm

    if args.seconds < 1:
        raise _UsageError(f"--seconds {args.seconds}: run at least one period")
    out = args.out or demo_dir()
    talk = write_talk(out / "talk.wav", args.seconds)
    request = ConverseRequest(
        settings=Settings(arm=Arm.parse(args.arm), device=args.device),
        input=talk,
        output=out / "assistant.wav",
        trace=out / "trace.json",
        seconds=args.seconds,
    )
    summary = converse(request)
    print(f"demo: files in {out} (open trace.json in ui.perfetto.dev)", file=sys.stderr)
    print(json.dumps(summary))
    return EXIT_OK


def _add_gui(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subparsers.add_parser(
        "gui",
        help="open the desktop app: converse, switch arms live, watch cadence, export",
        description="The desktop app; `duplexcadence gui --help` lists its options.",
        add_help=False,
    )  # main() hands everything after `gui` to app.gui.launch, which parses it


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
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gui"]:
        return _run_gui(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except DeclarationNotFound as error:
        print(f"duplexcadence: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except _UsageError as error:
        print(f"duplexcadence: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except DeclarationError as error:
        print(f"duplexcadence: invalid declaration: {error}", file=sys.stderr)
        return EXIT_INVALID
    return status


if __name__ == "__main__":
    sys.exit(main())

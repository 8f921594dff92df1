"""A headless conversation per arm: cadence per native period, memory, replay, exactness.

    python3 bench/converse.py --out bench/results/converse_h200.json            # GPU, full size
    python3 bench/converse.py --out /tmp/c.json --device cpu --model-size small --periods 10

Each arm runs the app's own session (``app.session.build_session``: synthetic backbone with
silero-vad turn-taking, Token2Wav, warm-up captures) on the same user audio for ``--periods``
native periods (1 s each) on a simulated clock (periods back to back; cadence is the processing
time of each). The user's side is real speech: three espeak-ng utterances committed under
``assets/talk/`` (``app.demo``; the GPU machine has no espeak, ``--make-talk`` regenerates them
here) on a seeded schedule: a question answered in full, one interrupted by a barge-in, repeated.

Per arm: cadence p50/p95/max, periods over budget (processing > period), peak allocated and
reserved GPU memory over the conversation (after warm-up) and over the whole session, replay
hits and misses, and the periods whose PCM equals eager's bit for bit. By default each arm
loads what it deploys with (state-rule arms without the 2.2 GB stock envelope; ``--envelope``
loads it for every arm, as the app does for live switching). A final ``switching`` run starts
at SRc with the envelope and cycles through every arm every ``--switch-every`` periods.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.demo import RATE, TALK, UTTERANCES, talk_periods
from app.session import build_session
from app.settings import Settings
from bench.env_info import environment
from engine.arms import ARMS, Arm
from engine.cadence import percentile, replay_totals
from engine.duplex import PeriodOutcome
from engine.sizes import MIB


def make_talk() -> None:
    """Speak the utterances with espeak-ng into ``assets/talk/*.flac`` (16 kHz, trimmed)."""
    import soundfile

    from tests.speech import conversation

    TALK.mkdir(exist_ok=True)
    for name, text in UTTERANCES.items():
        audio = conversation([text]).audio
        soundfile.write(TALK / f"{name}.flac", audio, RATE, subtype="PCM_16")


def exact_periods(reference: list[np.ndarray], pcm: list[np.ndarray]) -> int:
    """Periods whose PCM equals the reference's bit for bit."""
    return sum(np.array_equal(a, b) for a, b in zip(reference, pcm, strict=True))


def run(
    args: argparse.Namespace,
    arm: Arm,
    talk: list[np.ndarray],
    envelope: bool,
    switches: dict[int, Arm] | None = None,
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """One conversation; returns its figures and its PCM per period."""
    cuda = args.device == "cuda"
    settings = Settings(
        family="synthetic", device=args.device, model_size=args.model_size, arm=arm, seed=args.seed,
        checkpoint=args.checkpoint,
    )  # fmt: skip
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    session = build_session(settings, n_steps=args.n_steps, envelope=envelope)
    build_s = time.perf_counter() - t0
    session_peak = _peaks(cuda, reset=True)
    outcomes: list[PeriodOutcome] = []
    for k, mic in enumerate(talk):
        if switches and k in switches:
            session.request_arm(switches[k])
        outcomes.append(session.step(mic))
    conversation_peak = _peaks(cuda, reset=False)
    session.close()
    figures = _figures(outcomes, args.periods)
    figures.update(
        build_s=round(build_s, 2),
        warmup=session.warmup,
        envelope=envelope,
        peak_allocated_mib=conversation_peak[0],
        peak_reserved_mib=conversation_peak[1],
        session_peak_allocated_mib=max(session_peak[0], conversation_peak[0]),
        session_peak_reserved_mib=max(session_peak[1], conversation_peak[1]),
    )
    pcm = [o.pcm for o in outcomes]
    del session, outcomes
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return figures, pcm


def _peaks(cuda: bool, reset: bool) -> tuple[float, float]:
    if not cuda:
        return 0.0, 0.0
    torch.cuda.synchronize()
    peaks = (
        round(torch.cuda.max_memory_allocated() / MIB, 1),
        round(torch.cuda.max_memory_reserved() / MIB, 1),
    )
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return peaks


def _figures(outcomes: list[PeriodOutcome], periods: int) -> dict[str, Any]:
    ms = [o.record.processing_s * 1e3 for o in outcomes]
    speaking = [o.record.processing_s * 1e3 for o in outcomes if o.calls]
    totals = [replay_totals(o.record.replay) for o in outcomes]
    misses: dict[str, int] = {}
    for t in totals:
        for key, n in t.items():
            if key.startswith("misses."):
                misses[key[7:]] = misses.get(key[7:], 0) + int(n)
    return {
        "periods": len(outcomes),
        "p50_ms": round(percentile(ms, 0.5), 2),
        "p95_ms": round(percentile(ms, 0.95), 2),
        "max_ms": round(max(ms), 2),
        "synthesis_p50_ms": round(percentile(speaking, 0.5), 2) if speaking else None,
        "synthesis_p95_ms": round(percentile(speaking, 0.95), 2) if speaking else None,
        "over_budget": sum(o.record.over_budget for o in outcomes),
        "speaking_periods": len(speaking),
        "turns": sum(c.kind == "flush" for o in outcomes for c in o.calls),
        "barge_ins": sum(bool(o.record.loop.get("barge_in")) for o in outcomes),
        "calls": sum(len(o.calls) for o in outcomes),
        "replay_hits": sum(int(t.get("hits", 0)) for t in totals),
        "replay_misses": sum(int(t.get("misses", 0)) for t in totals),
        "miss_reasons": misses,
        "arms_seen": sorted({o.record.arm for o in outcomes}),
        "stages_ms": _stages([o for o in outcomes if o.calls]),
        "period_ms": [round(x, 1) for x in ms],
        "events": _events(outcomes),
        "slowest": sorted(
            ({"period": o.record.index, "ms": round(o.record.processing_s * 1e3, 1),
              "calls": [f"{c.kind}:{c.tokens}" for c in o.calls],
              "replay": {k: v for k, v in replay_totals(o.record.replay).items() if v}}
             for o in outcomes),
            key=lambda p: -float(p["ms"]),  # type: ignore[arg-type]
        )[:5],
    }  # fmt: skip


def _stages(outcomes: list[PeriodOutcome]) -> dict[str, dict[str, float]]:
    """p50/p95/max per stage span (backbone, synthesis, flow, vocoder) over speaking periods."""
    per: dict[str, list[float]] = {}
    for o in outcomes:
        for name, value in o.record.op_ms().items():
            per.setdefault(name, []).append(value)
    return {
        name: {
            "p50": round(percentile(v, 0.5), 2),
            "p95": round(percentile(v, 0.95), 2),
            "max": round(max(v), 2),
        }
        for name, v in per.items()
    }


def _events(outcomes: list[PeriodOutcome]) -> dict[str, Any]:
    """Counts of the periods' events by kind, and the details of the first few fallbacks."""
    counts: dict[str, int] = {}
    fallbacks: list[str] = []
    for o in outcomes:
        for e in o.record.events:
            counts[e["kind"]] = counts.get(e["kind"], 0) + 1
            if e["kind"] == "fallback" and len(fallbacks) < 3:
                fallbacks.append(f"{e.get('op')}: {e.get('reason')} {e.get('detail')}"[:400])
    return {"counts": counts, "fallbacks": fallbacks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="result JSON")
    parser.add_argument("--periods", type=int, default=120)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model-size", default="full", choices=("full", "small"))
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--arms", default=",".join(map(str, ARMS)))
    parser.add_argument("--n-steps", type=int, help="solver steps (default: the size's, 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envelope", action="store_true", help="stock envelope for every arm")
    parser.add_argument("--switch-every", type=int, default=10, help="0: no switching run")
    parser.add_argument("--make-talk", action="store_true", help="regenerate assets/talk (espeak)")
    args = parser.parse_args(argv)
    if args.make_talk:
        make_talk()
        if args.out is None:
            return 0
    if args.out is None:
        parser.error("--out is required")
    logging.getLogger("duplexcadence.replay").setLevel(logging.ERROR)
    if args.device == "cpu":
        torch.set_num_threads(1)
    torch.backends.cudnn.deterministic = True
    arms = [Arm.parse(a) for a in args.arms.split(",")]
    talk = talk_periods(args.periods, args.seed)
    result: dict[str, Any] = {
        **environment(" ".join(["python3", "bench/converse.py", *(argv or sys.argv[1:])])),
        "periods": args.periods,
        "model_size": args.model_size,
        "device": args.device,
        "weights": "checkpoint" if args.checkpoint else "seeded random",
        "arms": {},
    }
    reference: list[np.ndarray] | None = None
    for arm in [Arm.EAGER, *[a for a in arms if a is not Arm.EAGER]]:
        figures, pcm = run(args, arm, talk, envelope=args.envelope or not arm.state_rule)
        reference = reference if reference is not None else pcm
        figures["exact_periods"] = exact_periods(reference, pcm)
        result["arms"][str(arm)] = figures
        _say(arm, figures)
    if args.switch_every > 0 and reference is not None:
        order = [a for a in ARMS if a is not Arm.SRC] + [Arm.SRC]
        switches = {
            k: order[i % len(order)]
            for i, k in enumerate(range(args.switch_every, args.periods, args.switch_every))
        }
        figures, pcm = run(args, Arm.SRC, talk, envelope=True, switches=switches)
        figures["exact_periods"] = exact_periods(reference, pcm)
        result["arms"]["switching"] = figures
        _say("switching", figures)
    result["torch_threads"] = torch.get_num_threads()  # as the sessions set it
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _say(arm: object, f: dict[str, Any]) -> None:
    print(
        f"{arm!s:9} p50 {f['p50_ms']:7.1f} ms  p95 {f['p95_ms']:7.1f}  max {f['max_ms']:7.1f}  "
        f"over {f['over_budget']:3}  peak {f['peak_allocated_mib']:8.1f} MiB  "
        f"hits {f['replay_hits']:5} misses {f['replay_misses']:5}  "
        f"exact {f['exact_periods']}/{f['periods']}  turns {f['turns']} barge {f['barge_ins']}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())

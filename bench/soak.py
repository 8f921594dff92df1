"""A headless soak: the app's session for N minutes on a looping conversation, RSS each minute.

    python3 bench/soak.py --out bench/results/soak_cpu.json                 # 10 min, CPU, small
    python3 bench/soak.py --out /tmp/soak.json --minutes 1 --sample-s 10    # a quick look

The session (synthetic backbone, small Token2Wav on the CPU, SRc, trace written and fsynced every
period) hears the demo conversation (``app.demo``: the talk ``bench/converse.py`` uses) in a
loop, periods back to back (simulated clock) unless ``--realtime``. Every ``--sample-s`` seconds
it samples the resident set; the result JSON has the samples, the growth from the first sample
after ``--settle-s`` to the last and to the highest (the issue's bar: under 5%), periods run,
over-budget periods, turns and barge-ins. A crash is a crash: the script exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.demo import talk_periods
from app.session import build_session
from app.settings import Settings
from bench.env_info import environment
from engine.arms import Arm
from engine.metrics import memory_stats
from engine.sizes import MIB


def rss_mib() -> float:
    return memory_stats(torch.device("cpu"))["rss_bytes"] / MIB


def soak(args: argparse.Namespace, trace_dir: Path) -> dict[str, Any]:
    settings = Settings(
        family="synthetic",
        device="cpu",
        model_size="small",
        arm=Arm.parse(args.arm),
        seed=args.seed,
    )
    session = build_session(settings, trace=trace_dir / "soak.jsonl")
    talk = talk_periods(120, args.seed)
    samples: list[dict[str, float]] = []
    counts = {"periods": 0, "over_budget": 0, "turns": 0, "barge_ins": 0}
    t0 = time.monotonic()
    next_sample, end = t0, t0 + args.minutes * 60
    while True:
        now = time.monotonic()
        if now >= next_sample:
            samples.append({"t_s": round(now - t0, 1), "periods": counts["periods"],
                            "rss_mib": round(rss_mib(), 2)})  # fmt: skip
            _say(samples[-1])
            next_sample += args.sample_s
        if now >= end:
            break
        k = counts["periods"]
        if args.realtime:
            time.sleep(max(0.0, t0 + k * session.period_s - now))
        outcome = session.step(talk[k % len(talk)])
        counts["periods"] += 1
        counts["over_budget"] += outcome.record.over_budget
        counts["turns"] += sum(c.kind == "flush" for c in outcome.calls)
        counts["barge_ins"] += bool(outcome.record.loop.get("barge_in"))
    session.close()
    return {**counts, "samples": samples, **_growth(samples, args.settle_s)}


def _growth(samples: list[dict[str, float]], settle_s: float) -> dict[str, Any]:
    settled = [s for s in samples if s["t_s"] >= settle_s] or samples
    base, last = settled[0]["rss_mib"], samples[-1]["rss_mib"]
    peak = max(s["rss_mib"] for s in settled)
    return {
        "baseline_rss_mib": base,
        "baseline_t_s": settled[0]["t_s"],
        "final_rss_mib": last,
        "growth_pct": round(100 * (last - base) / base, 2),
        "peak_growth_pct": round(100 * (peak - base) / base, 2),
    }


def _say(sample: dict[str, float]) -> None:
    t, periods, rss = sample["t_s"], sample["periods"], sample["rss_mib"]
    print(f"t {t:7.1f} s  periods {periods:6.0f}  rss {rss:8.1f} MiB", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sample-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=60.0, help="baseline sample time")
    parser.add_argument("--arm", default="SRc")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--realtime", action="store_true", help="one period per second")
    args = parser.parse_args(argv)
    logging.getLogger("duplexcadence.replay").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    command = " ".join(["python3", "bench/soak.py", *(argv or sys.argv[1:])])
    with tempfile.TemporaryDirectory(prefix="dc-soak-") as folder:
        figures = soak(args, Path(folder))
    result = {**environment(command), "minutes": args.minutes, "arm": args.arm, **figures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"growth {figures['growth_pct']}% (peak {figures['peak_growth_pct']}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

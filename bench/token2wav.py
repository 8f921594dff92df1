"""Token2Wav flow benchmark: every arm against eager, interleaved, plus the vendor's own paths.

    python3 bench/token2wav.py OUT_DIR [--chunks 200] [--turn 10] [--prompt-tokens N]

On one GPU, fp32, seeded random weights at the released sizes, at MiniCPM-o 4.5's declared
operating point (the result's ``operating_point``: P = 2 × prompt tokens, by default the
declaration's voice, 28-token windows at a 25-token stride, 10 solver steps, retention prompt +
100). One chunk = the flow's
``inference_chunk`` plus both cache trims (the vocoder is not in it, as in ANCHORS.md).

- latency: after ``--warm-turns`` turns of warm-up (captures), ``--chunks`` steady chunks in turns
  of ``--turn`` calls; every call runs every arm, eager included, on the same tokens in a
  shuffled order (results before 2026-11-30 06:40 UTC ran eager first): host time
  with synchronize, p50/p95/p99, the paired ratio to eager with a 95% interval, and exactness
  (``torch.equal`` of every arm's mel against eager's);
- memory: each arm in its own process (``--memory ARM``): peak allocated / reserved over the whole
  session, the weights included (the peak is reset once they are loaded), the state held before
  streaming, capture time and bytes; the state-rule arms load the flow without the stock
  envelope, as they would deploy. The vendor's eager peer is measured in the same scope, and
  every peak is also given as a fraction of eager's and of the vendor eager's;
- the exact-replay floor: the summed GPU time of one eager chunk's kernels (profiler);
- peers (``bench/token2wav_peers.py``, own process: the vendor import mutates dynamo settings),
  ``--peer-chunks`` steady chunks each, checked against the eager mels the latency phase saved
  (``OUT_DIR/eager_mels.pt``).

Writes ``OUT_DIR/token2wav_<gpu>.json`` in the format bench/README.md describes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.token2wav.binding import FlowBinding, bind_flow
from adapters.token2wav.checkpoint import load_token2wav
from adapters.token2wav.declared import flow_declaration
from adapters.token2wav.prompt import random_voice
from adapters.token2wav.stream import FlowStream
from bench.env_info import environment
from engine.arms import ARMS, Arm
from engine.cadence import percentile
from engine.replay import ReplayEngine
from engine.sizes import MIB

FAMILY = "minicpmo45"  # MiniCPM-o 4.5's decoder
VALUES = flow_declaration(FAMILY).values()  # its declared operating point


def binding(prompt_tokens: int) -> FlowBinding:
    """The flow's binding for a voice of ``prompt_tokens`` tokens."""
    return bind_flow(FAMILY, VALUES["frames_per_token"] * prompt_tokens)


def voice(
    prompt_tokens: int, seed: int = 1, device: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The family's seeded random voice of ``prompt_tokens`` tokens (its loader's draws, from
    ``manual_seed(seed)``): tokens, mel, x-vector."""
    prompt = random_voice(VALUES["frames_per_token"] * prompt_tokens, seed - 1, device, FAMILY)
    return prompt.tokens, prompt.mel, prompt.spk


def windows(count: int, seed: int = 2, device: str = "cuda") -> list[torch.Tensor]:
    """``count`` steady windows of seeded random tokens, as wide and from the vocabulary the
    declaration states."""
    g = torch.Generator().manual_seed(seed)
    shape = (1, VALUES["tokens_per_call"])
    return [
        torch.randint(0, VALUES["vocab"], shape, generator=g, dtype=torch.int32).to(device)
        for _ in range(count)
    ]


def make_stream(flow: Any, prompt: tuple, arm: Arm, replay: ReplayEngine) -> FlowStream:
    tokens, mel, spk = prompt
    bound = bind_flow(FAMILY, mel.shape[1])
    return FlowStream(flow, tokens, mel, spk, binding=bound, arm=arm, replay=replay)


def vendor_prompt(
    flow: Any, tokens: torch.Tensor, mel: torch.Tensor, spk: torch.Tensor
) -> tuple[dict[str, torch.Tensor], SimpleNamespace]:
    """The vendor's prompt cache (its ``setup_cache`` on the prompt's tokens and their first
    lookahead tokens again, as minicpmo-utils' Token2wav does) and the state its trims read (a
    copy of that cache as ``stream_cache``, the conformer's history frames)."""
    bound = bind_flow(FAMILY, mel.shape[1])
    ahead = tokens[:, : bound.lookahead]
    prompt = flow.setup_cache(torch.cat([tokens, ahead], dim=1), mel, spk)
    prompt = {k: v.clone() for k, v in prompt.items()}
    state = SimpleNamespace(flow=flow, CONFORMER_HISTORY_FRAMES=bound.conformer.history)
    state.stream_cache = {k: v.clone() for k, v in prompt.items()}
    return prompt, state


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def percentiles(ms: list[float]) -> dict[str, float]:
    return {f"p{q}_ms": round(percentile(ms, q / 100), 2) for q in (50, 95, 99)}


def paired(arm_ms: list[float], eager_ms: list[float]) -> dict[str, float]:
    """Mean per-call ratio arm/eager − 1 with a normal 95% interval (same calls, same process)."""
    d = np.asarray(arm_ms) / np.asarray(eager_ms) - 1.0
    half = 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d))
    mean = float(d.mean())
    return {
        "vs_eager_pct": round(100 * mean, 2),
        "ci95_pct": [round(100 * (mean - half), 2), round(100 * (mean + half), 2)],
    }


def latency(args: argparse.Namespace) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """The arms' figures, and eager's mel of every call (CPU): the peers' reference."""
    flow, _ = load_token2wav(None, seed=args.seed, device="cuda")
    prompt = voice(args.prompt_tokens)
    engines = {arm: ReplayEngine("cuda", enabled=arm.replay) for arm in args.arms}
    streams = {arm: make_stream(flow, prompt, arm, engines[arm]) for arm in args.arms}
    stream_tokens = windows(args.warm_turns * args.turn + args.chunks)
    times: dict[Arm, list[float]] = {arm: [] for arm in args.arms}
    exact = dict.fromkeys(args.arms, 0)
    reference: list[torch.Tensor] = []
    order = random.Random(args.seed)
    with torch.no_grad():
        for i, tokens in enumerate(stream_tokens):
            if i % args.turn == 0:
                for stream in streams.values():
                    stream.reset()
            steady = i >= args.warm_turns * args.turn
            if i == args.warm_turns * args.turn:
                for engine in engines.values():
                    engine.reset_counters()
            # Every arm, eager included, in a fresh random order every call: no arm always
            # runs first or follows the same neighbour (the host's state after the previous arm
            # moves a host-bound chunk by a few percent). Eager's mel is the reference.
            arms = list(args.arms)
            order.shuffle(arms)
            mels = {}
            for arm in arms:
                mels[arm], ms = timed(lambda s=streams[arm], t=tokens: s.chunk(t))
                if steady:
                    times[arm].append(ms)
            reference.append(mels[Arm.EAGER].cpu())
            if steady:
                for arm in args.arms:
                    exact[arm] += bool(torch.equal(mels[arm], mels[Arm.EAGER]))
    floor_ms = floor(streams[Arm.EAGER], stream_tokens[0])
    result: dict[str, Any] = {"floor_ms": floor_ms, "arms": {}}
    if args.profile:
        result["profile"] = {str(a): op_profile(streams[a], stream_tokens[0]) for a in args.profile}
    for arm in args.arms:
        total = engines[arm].snapshot()["total"]
        entry = {**percentiles(times[arm]), "calls": len(times[arm]), "exact_calls": exact[arm]}
        entry.update(replay_hits=total["hits"], replay_misses=total["misses"])
        if arm is not Arm.EAGER:
            entry.update(paired(times[arm], times[Arm.EAGER]))
        result["arms"][str(arm)] = entry
    return result, reference


def floor(stream: FlowStream, tokens: torch.Tensor) -> float:
    """Summed GPU time (ms) of the kernels one eager chunk launches."""
    prof = _profiled(stream, tokens, cpu=False)
    # Kernels are attributed to the ops that launched them: their self device times add up to
    # the chunk's summed kernel time.
    total_us = sum(e.self_device_time_total for e in prof.key_averages())
    return round(total_us / 1e3, 2)


def op_profile(stream: FlowStream, tokens: torch.Tensor, top: int = 15) -> dict[str, Any]:
    """Where one chunk of ``stream``'s arm spends host and device time (``--profile``)."""
    averages = _profiled(stream, tokens, cpu=True).key_averages()

    def rows(key: str) -> list[dict[str, Any]]:
        ranked = sorted(averages, key=lambda e: getattr(e, key), reverse=True)[:top]
        return [
            {"op": e.key, "calls": e.count, "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 3),
             "self_device_ms": round(e.self_device_time_total / 1e3, 3)}
            for e in ranked
        ]  # fmt: skip

    return {
        "host_ms": round(sum(e.self_cpu_time_total for e in averages) / 1e3, 2),
        "device_ms": round(sum(e.self_device_time_total for e in averages) / 1e3, 2),
        "top_host": rows("self_cpu_time_total"),
        "top_device": rows("self_device_time_total"),
    }


def _profiled(stream: FlowStream, tokens: torch.Tensor, *, cpu: bool) -> Any:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if cpu else [])
    stream.reset()
    with torch.no_grad(), profile(activities=activities) as prof:
        stream.chunk(tokens)
        torch.cuda.synchronize()
    return prof


def memory(arm: Arm, args: argparse.Namespace) -> dict[str, Any]:
    """One arm alone in this process: peak memory over a session after the weights are loaded."""
    flow, _ = load_token2wav(None, seed=args.seed, device="cuda", envelope=not arm.state_rule)
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    engine = ReplayEngine("cuda", enabled=arm.replay)
    stream = make_stream(flow, voice(args.prompt_tokens), arm, engine)
    held = torch.cuda.memory_allocated() - weights
    with torch.no_grad():
        for i, tokens in enumerate(windows(args.memory_chunks)):
            if i % args.turn == 0:
                stream.reset()
            stream.chunk(tokens)
    torch.cuda.synchronize()
    total = engine.snapshot()["total"]
    return {
        "peak_allocated_mib": round(torch.cuda.max_memory_allocated() / MIB, 1),
        "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / MIB, 1),
        "weights_mib": round(weights / MIB, 1),
        "held_before_streaming_mib": round(held / MIB, 1),
        "capture_s": round(total["capture_s"], 3),
        "capture_mib": round(total["capture_bytes"] / MIB, 1),
        "captures": total["captures"],
    }


def peak_ratios(result: dict[str, Any]) -> None:
    """Every arm's and peer's peak as a fraction of eager's and of the vendor eager's.

    Both peaks have one scope: allocated bytes over the whole stream, the weights (with the stock
    envelope) and the prompt set-up included, each in a process of its own.
    """
    vendor = result.get("peers", {}).get("vendor_eager", {}).get("peak_allocated_mib")
    eager = result["arms"].get("eager", {}).get("peak_allocated_mib")
    rows = [*result["arms"].values(), *result.get("peers", {}).values()]
    for row in rows:
        peak = row.get("peak_allocated_mib")
        if peak is None:
            continue
        if eager:
            row["peak_vs_eager"] = round(peak / eager, 3)
        if vendor:
            row["peak_vs_vendor_eager"] = round(peak / vendor, 3)


def add_prompt_tokens(parser: argparse.ArgumentParser) -> None:
    """``--prompt-tokens``: the voice's length, by default the declaration's voice."""
    default = VALUES["f_prompt"] // VALUES["frames_per_token"]
    parser.add_argument(
        "--prompt-tokens", type=int, default=default,
        help=f"the voice's tokens (default {default}: the declaration's f_prompt)",
    )  # fmt: skip


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The operating point and stream shape shared by this script, its children and the peers."""
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--turn", type=int, default=10)
    parser.add_argument("--warm-turns", type=int, default=3)
    add_prompt_tokens(parser)
    parser.add_argument("--memory-chunks", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile-chunks", type=int, default=13)


def run_child(script: Path, args: list[str]) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter; its last stdout line is its JSON result."""
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {"error": done.stderr[-3000:]}
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, nargs="?")
    add_common_args(parser)
    parser.add_argument("--memory", type=Arm.parse, help="(child) measure one arm's memory")
    parser.add_argument(
        "--profile", type=Arm.parse, nargs="*", default=[],
        help="arms whose chunk to profile op by op after the latency phase (e.g. eager S)",
    )  # fmt: skip
    parser.add_argument("--skip-memory", action="store_true", help="latency (and peers) only")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument(
        "--arms", type=Arm.parse, nargs="+", default=list(ARMS),
        help="arms to measure (eager is always included: it is the reference)",
    )  # fmt: skip
    parser.add_argument("--memory-jobs", type=int, default=3, help="memory children at once")
    parser.add_argument("--peer-chunks", type=int, default=100, help="steady chunks per peer")
    args = parser.parse_args()
    torch.backends.cudnn.deterministic = True
    args.arms = [Arm.EAGER, *(a for a in dict.fromkeys(args.arms) if a is not Arm.EAGER)]
    if args.memory is not None:
        print(json.dumps(memory(args.memory, args)))
        return
    assert args.out is not None, "give OUT_DIR"
    command = "python3 bench/token2wav.py " + " ".join(sys.argv[1:])
    result: dict[str, Any] = {**environment(command)}
    point = binding(args.prompt_tokens)
    result["operating_point"] = {
        "prompt_frames": point.prompt_frames,
        "tokens_per_call": point.values["tokens_per_call"],
        "stride_tokens": point.stride_tokens,
        "n_steps": point.n_steps,
        "retained": point.values["f_retained"],
        "dtype": "float32",
        "chunks": args.chunks,
        "turn": args.turn,
    }
    gpu = (result.get("gpu") or "gpu").replace("NVIDIA ", "").replace(" ", "_").lower()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"token2wav_{gpu}.json"

    def save(stage: str) -> None:  # after every stage: a later failure keeps what was measured
        result["completed"] = stage
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"[{time.strftime('%H:%M:%S')}] {stage} done", flush=True)

    figures, reference = latency(args)
    result.update(figures)
    save("latency")
    if not args.skip_memory:
        # One process per arm (peaks are per process); a few at once, after the latency phase,
        # so they share the GPU only with each other: memory figures do not depend on timing.
        def child(arm: Arm) -> dict[str, Any]:
            return run_child(Path(__file__), ["--memory", str(arm), *_common(args)])

        with ThreadPoolExecutor(max_workers=args.memory_jobs) as pool:
            for arm, measured in zip(args.arms, pool.map(child, args.arms), strict=True):
                result["arms"][str(arm)].update(measured)
        save("memory")
    if not args.skip_peers:
        peers = Path(__file__).with_name("token2wav_peers.py")
        # The peers compare against these mels instead of streaming our eager path again (~80 s).
        reference_path = args.out / "eager_mels.pt"
        torch.save(reference, reference_path)
        peer_args = [*_common(args), "--chunks", str(args.peer_chunks)]  # the last one wins
        result["peers"] = run_child(peers, [*peer_args, "--reference", str(reference_path)])
        peak_ratios(result)
        save("peers")
    print(json.dumps(result, indent=2))


def _common(args: argparse.Namespace) -> list[str]:
    return [
        "--chunks",
        str(args.chunks),
        "--turn",
        str(args.turn),
        "--prompt-tokens",
        str(args.prompt_tokens),
        "--seed",
        str(args.seed),
        "--memory-chunks",
        str(args.memory_chunks),
        "--warm-turns",
        str(args.warm_turns),
    ]


if __name__ == "__main__":
    main()

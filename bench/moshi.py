"""Moshi per 80-ms frame: every arm against the vendor's own loop, in one process, one command.

    python3 bench/moshi.py OUT_DIR              # the released 7B (bf16) on CUDA -> moshi_h200.json
    python3 bench/moshi.py OUT_DIR --tiny       # the small config on the CPU: proves the script

Seeded random weights at the released config (built on the device, timed), seeded noise in,
sampling on. For each temporal-step attention kernel in ``--kernels`` (``pinned``: the
declaration's, efficient; ``default``: torch's choice; ``efficient``, ``math``) in turn:

- our stream, warmed and sealed as the app loads it (every replay arm captured), then per arm
  ``--frames`` frames from a reset and one seed: frame time (encode + LM + depformer + decode,
  synchronized) p50/p95/p99, peak allocated/reserved memory over the arm's frames, replay
  hits/misses, and how many frames equal eager's (tokens and speech, bit for bit);
- the exact-replay floor: summed device time of one steady eager frame (torch.profiler), and
  the same frame's timeline under SRc and Rc: the time between the graph's nodes, apart;
- the peers on the same weights: ``vendor_eager`` (the package's loop, ``NO_CUDA_GRAPH``) and
  ``vendor_cudagraphed`` (its ``CUDAGraphed``), the temporal kernel pinned as ours or not,
  compared with our eager of the same kernels frame by frame.

Every latency sits beside its floor; ``margin_ms`` is the 80-ms budget minus p99. Memory is
measured in the one process (all arms' graphs live), each arm and peer from an emptied cache:
weights and graph memory are reported apart.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

# Run as a script, this file's folder leads sys.path, and its name would shadow the ``moshi``
# package: the repository's root takes that place.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from adapters.moshi.checkpoint import MoshiModels, build_models
from adapters.moshi.config import MoshiSize, size_for
from adapters.moshi.family import warm_up
from adapters.moshi.frame import vendor_graphs_off
from adapters.moshi.regions import ring_shapes
from adapters.moshi.stream import MoshiStream
from bench.env_info import environment
from engine.arms import ARMS, Arm
from engine.declaration_io import load_declaration
from engine.replay import ReplayEngine
from engine.sizes import MIB

KERNEL_SETS = ("pinned", "default", "efficient", "math")
Frame = tuple[torch.Tensor, torch.Tensor | None]  # tokens, speech (on the CPU)


def noise(n: int, spf: int, device: torch.device, seed: int = 7) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        ((0.05 + 0.3 * (i % 7 < 4)) * torch.randn((1, 1, spf), generator=g)).to(device)
        for i in range(n)
    ]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def percentiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {f"p{q}_ms": round(float(np.percentile(a, q)), 2) for q in (50, 95, 99)}


@contextmanager
def peak(device: torch.device) -> Iterator[dict[str, float]]:
    """Peak allocated/reserved MiB over the block (CUDA; empty on the CPU). The cache is emptied
    first, so each arm and peer reserves only what it needs, not what an earlier one left."""
    out: dict[str, float] = {}
    if device.type == "cuda":
        sync(device)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    yield out
    if device.type == "cuda":
        sync(device)
        out["peak_allocated_mib"] = round(torch.cuda.max_memory_allocated(device) / MIB, 1)
        out["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved(device) / MIB, 1)


def timed_frames(
    step: Callable[[torch.Tensor], Frame | None], frames: list[torch.Tensor], device: torch.device
) -> tuple[list[Frame | None], list[float]]:
    outs, ms = [], []
    for frame in frames:
        sync(device)
        t0 = time.perf_counter()
        out = step(frame)
        sync(device)
        ms.append((time.perf_counter() - t0) * 1e3)
        outs.append(out)
    return outs, ms


def exact_frames(outs: list[Frame | None], reference: list[Frame | None]) -> int:
    def same(a: Frame | None, b: Frame | None) -> bool:
        if a is None or b is None:
            return a is None and b is None
        if not torch.equal(a[0], b[0]) or (a[1] is None) != (b[1] is None):
            return False
        return a[1] is None or torch.equal(a[1], b[1])  # type: ignore[arg-type]

    return sum(same(a, b) for a, b in zip(outs, reference, strict=True))


def moshi_stream(
    models: MoshiModels,
    sdpa: str,
    replay: ReplayEngine,
    spf: int,
    *,
    rings: Mapping[str, tuple[int, ...]],
) -> MoshiStream:
    from moshi.models.lm import LMGen

    return MoshiStream(
        models.mimi, LMGen(models.lm), replay=replay, arm=Arm.EAGER, samples_per_frame=spf,
        sdpa=sdpa, rings=rings,
    )  # fmt: skip


def our_arms(
    models: MoshiModels,
    sdpa: str,
    frames: list[torch.Tensor],
    args: argparse.Namespace,
    make: Callable[[MoshiModels, str, ReplayEngine, int], MoshiStream],
) -> tuple[dict[str, Any], list[Frame | None]]:
    """Every arm of our stream (warmed and sealed as the app loads it), eager first. Each arm
    starts with a reset (``reset_ms``: a prompt phase, where the stream has one) and its first
    frame (``first_answer_ms``: the reset and that frame, synchronized)."""
    device = frames[0].device
    replay = ReplayEngine(device)
    stream = make(models, sdpa, replay, frames[0].shape[-1])
    free_before = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 0
    warmup = warm_up(stream, replay, seed=args.seed, report=lambda stage, fraction: None)
    graph_mib = (
        (free_before - torch.cuda.mem_get_info(device)[0]) / MIB if device.type == "cuda" else 0
    )

    def step(frame: torch.Tensor) -> Frame:
        out = stream.step(frame)
        return out.tokens.cpu(), None if out.pcm is None else out.pcm.cpu()

    result: dict[str, Any] = {"warmup": warmup, "warmup_graph_mib": round(graph_mib, 1)}
    reference: list[Frame | None] = []
    arms = [Arm.parse(a) for a in args.arms]
    for arm in [Arm.EAGER, *[a for a in arms if a is not Arm.EAGER]]:
        stream.set_arm(arm)
        replay.reset_counters()
        torch.manual_seed(args.seed)
        with peak(device) as memory:
            sync(device)
            t0 = time.perf_counter()
            stream.reset()
            sync(device)
            reset_ms = (time.perf_counter() - t0) * 1e3
            outs, ms = timed_frames(step, frames, device)
        if arm is Arm.EAGER:
            reference = outs
        totals = replay.snapshot()["total"]
        result[str(arm)] = {
            **percentiles(ms[1:]),  # frame 0 after a reset has no speech to decode
            "frames": len(frames),
            "exact_frames": exact_frames(outs, reference),
            "reset_ms": round(reset_ms, 2),
            "first_answer_ms": round(reset_ms + ms[0], 2),
            "replay_hits": totals.get("hits", 0),
            "replay_misses": totals.get("misses", {}),
            **memory,
        }
        print(f"{sdpa:9} {arm!s:5} {result[str(arm)]}", file=sys.stderr)
    result["timeline"] = {}
    for arm in (Arm.EAGER, *[a for a in (Arm.SRC, Arm.RC) if a in arms]):
        stream.set_arm(arm)
        result["timeline"][str(arm)] = timeline(stream, frames, device)
    eager_names = result["timeline"][str(Arm.EAGER)].pop("by_name_us", {})
    for arm_line in list(result["timeline"].values())[1:]:
        names = arm_line.pop("by_name_us", {})
        extra = {n: t - eager_names.get(n, 0.0) for n, t in names.items()}
        arm_line["slower_than_eager_us"] = [  # where the replayed frame's kernels take longer
            (n, round(t, 1)) for n, t in sorted(extra.items(), key=lambda kv: -kv[1])[:8]
        ]
    result["floor_ms"] = result["timeline"][str(Arm.EAGER)].get("kernel_ms")
    stream.close()
    return result, reference  # the stream, its engine and graphs go with this frame


def timeline(
    stream: MoshiStream, frames: list[torch.Tensor], device: torch.device
) -> dict[str, Any]:
    """Where one steady frame of the stream's arm spends device time (torch.profiler, CUDA).

    ``kernel_ms`` sums the device activities (kernels, copies, fills) the frame runs: under
    eager it is the exact-replay floor. ``span_ms`` runs from the first activity's start to the
    last one's end, and ``gap_ms`` is the span not covered by any activity: launch latency
    between the graph's nodes under a replay arm, host time under eager. Activities inside a
    CUDA graph are traced one by one (CUPTI), so both arms are read the same way.
    """
    if device.type != "cuda":
        return {}
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    stream.reset()
    stream.step(frames[0])
    stream.step(frames[1])
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        stream.step(frames[2])
        sync(device)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    kinds = {"kernel": "kernels", "gpu_memcpy": "copies", "gpu_memset": "fills"}
    acts = sorted(
        (float(e["ts"]), float(e["dur"]), kinds[e["cat"]], str(e.get("name", "")))
        for e in events
        if e.get("cat") in kinds and e.get("ph") == "X"
    )
    if not acts:
        return {}
    busy, covered_to, gaps = 0.0, acts[0][0], []
    for ts, dur, _, name in acts:
        if ts > covered_to:
            gaps.append((ts - covered_to, name))
        busy += max(0.0, ts + dur - max(ts, covered_to))
        covered_to = max(covered_to, ts + dur)
    span = covered_to - acts[0][0]
    counts = {kind: sum(a[2] == kind for a in acts) for kind in kinds.values()}
    by_name: dict[str, float] = {}
    for _, dur, _, name in acts:
        by_name[name[:80]] = by_name.get(name[:80], 0.0) + dur
    gap_us = np.asarray([g for g, _ in gaps] or [0.0])
    return {
        "kernel_ms": round(sum(a[1] for a in acts) / 1e3, 2),
        "span_ms": round(span / 1e3, 2),
        "gap_ms": round((span - busy) / 1e3, 2),
        **counts,
        "gap_us_p50": round(float(np.percentile(gap_us, 50)), 2),
        "gap_us_p99": round(float(np.percentile(gap_us, 99)), 2),
        "largest_gaps": [(round(g, 1), name[:80]) for g, name in sorted(gaps)[-8:]],
        "by_name_us": by_name,
    }


@contextmanager
def pinned_forward_text(
    lm: Any, sdpa: str, methods: tuple[str, ...] = ("forward_text",)
) -> Iterator[None]:
    """The vendor's temporal step (``methods`` of ``lm``) with ``sdpa`` pinned, as ours pins it
    (instance attributes, removed on exit)."""
    if sdpa == "default":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[sdpa]

    def pin(method: Callable[..., Any]) -> Callable[..., Any]:
        def pinned(*args: Any) -> Any:
            with sdpa_kernel([backend]):
                return method(*args)

        return pinned

    for name in methods:
        setattr(lm, name, pin(getattr(lm, name)))
    try:
        yield
    finally:
        for name in methods:
            delattr(lm, name)


def vendor(
    models: MoshiModels,
    sdpa: str,
    frames: list[torch.Tensor],
    reference: list[Frame | None],
    *,
    graphs: bool,
    seed: int,
    warm: int = 4,
) -> dict[str, Any]:
    """The package's own loop: ``mimi.encode``, ``LMGen.step``, ``mimi.decode``."""
    from moshi.models.lm import LMGen

    device = frames[0].device
    with pinned_forward_text(models.lm, sdpa):
        gen = LMGen(models.lm)
        with models.mimi.streaming(1), gen.streaming(1), torch.no_grad():

            def step(frame: torch.Tensor) -> Frame | None:
                with _graphs(graphs, device):
                    tokens = gen.step(models.mimi.encode(frame))
                    if tokens is None:
                        return None
                    pcm = models.mimi.decode(tokens[:, 1:])
                return tokens.cpu(), pcm.cpu()

            timed_frames(step, frames[:warm], device)  # its graphs capture here
            models.mimi.reset_streaming()
            gen.reset_streaming()
            torch.manual_seed(seed)
            with peak(device) as memory:
                outs, ms = timed_frames(step, frames, device)
    ours = [None if r is None or (r[0] < 0).all() else r for r in reference[: len(frames)]]
    result = {
        **percentiles(ms[1:]),
        "frames": len(frames),
        "exact_frames": exact_frames(outs, ours),
        **memory,
    }
    return result


@contextmanager
def _graphs(on: bool, device: torch.device) -> Iterator[None]:
    """The vendor's graphs on (its default) or off exactly as our frame turns them off
    (``vendor_graphs_off``: its lazy ``torch.compile`` stays on CUDA, as in its own loop; turning
    it off there too changes kernels, and the frames then differ from the first sampled one)."""
    if on and device.type == "cuda":
        yield
        return
    with vendor_graphs_off(device):
        yield


def kernel_result(
    sdpa: str, arms: dict[str, Any], peers: dict[str, Any], budget_ms: float
) -> dict[str, Any]:
    """One kernel set's results: every arm and peer beside the 80-ms budget and the floor."""
    floor_ms = arms.pop("floor_ms")
    for entry in [*arms.values(), *peers.values()]:
        if isinstance(entry, dict) and "p50_ms" in entry:
            entry["margin_ms"] = round(budget_ms - entry["p99_ms"], 2)
            if floor_ms:
                entry["p50_vs_floor"] = round(entry["p50_ms"] / floor_ms, 3)
    print(f"{sdpa:9} peers {peers}", file=sys.stderr)
    warm = {k: arms.pop(k) for k in ("warmup", "warmup_graph_mib", "timeline")}
    return {"sdpa": sdpa, "floor_ms": floor_ms, "arms": arms, "peers": peers, **warm}


def report_head(
    command: str,
    model: str,
    models: MoshiModels,
    build: tuple[float, float],
    budget_ms: float,
    frames: int,
) -> dict[str, Any]:
    """A report's environment and model lines; ``build``: its seconds and the MiB it took."""
    build_s, weights_mib = build
    return {
        **environment(command),
        "model": f"{model}, seeded random weights",
        "dtype": str(next(models.lm.parameters()).dtype).removeprefix("torch."),
        "build_s": round(build_s, 1),
        "weights_mib": round(weights_mib, 1),
        "budget_ms": budget_ms,
        "frames": frames,
    }


def write_report(file: Path, report: dict[str, Any]) -> None:
    """Write ``report`` (after each kernel set: a run cut short keeps what it measured)."""
    report["memory_note"] = "one process: every replay arm's graphs are live while each arm runs"
    file.write_text(json.dumps(report, indent=2) + "\n")
    print(file)


def bench_parser(doc: str | None, stem: str) -> argparse.ArgumentParser:
    """The arguments every Moshi-path benchmark takes."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("out", type=Path, help=f"folder for {stem}_h200.json (or {stem}_tiny)")
    parser.add_argument("--tiny", action="store_true", help="the small config on the CPU")
    parser.add_argument("--frames", type=int, default=200, help="frames per arm (default 200)")
    parser.add_argument("--arms", nargs="+", default=[str(a) for a in ARMS])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--kernels", nargs="+", default=["pinned", "default"], choices=KERNEL_SETS,
        help="temporal-step attention kernels to run: pinned (the declaration's), default "
        "(torch's choice), efficient, math (default: pinned default)",
    )  # fmt: skip
    return parser


def start(args: argparse.Namespace, name: str) -> tuple[torch.device, Any, MoshiSize, float]:
    """The device, declaration ``name``, size and frame budget (ms) the arguments ask for."""
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cpu" if args.tiny else "cuda")
    if args.tiny:
        torch.set_num_threads(1)
    declaration = load_declaration(name)
    size = size_for("small" if args.tiny else "full", declaration)
    budget_ms = size.point["samples_per_frame"] / declaration.clock_rate("sample", size.point)
    return device, declaration, size, budget_ms * 1e3


def kernel_sets(names: list[str], declaration: Any, device: torch.device) -> dict[str, str]:
    """The temporal step's attention kernel of each named set (``pinned``: the declaration's
    on CUDA, math on the CPU; ``default``: torch's choice)."""
    pinned = declaration.operators["lm_step"].kernels.get("sdpa", "default")
    named = {"pinned": pinned if device.type == "cuda" else "math", "default": "default"}
    return {name: named.get(name, name) for name in names}


def main() -> None:
    parser = bench_parser(__doc__, "moshi")
    parser.add_argument("--vendor-eager-frames", type=int, default=50)
    args = parser.parse_args()
    device, declaration, size, budget_ms = start(args, "moshi")
    spf = size.point["samples_per_frame"]
    t0 = time.perf_counter()
    models = build_models(size, None, device, args.seed)
    sync(device)
    build_s = time.perf_counter() - t0
    weights_mib = torch.cuda.memory_allocated(device) / MIB if device.type == "cuda" else 0.0
    print(f"built {size.name} in {build_s:.1f} s ({weights_mib:.0f} MiB)", file=sys.stderr)
    frames = noise(args.frames, spf, device)
    results: dict[str, Any] = {}
    for name, sdpa in kernel_sets(args.kernels, declaration, device).items():
        make = functools.partial(moshi_stream, rings=ring_shapes(declaration, size.point))
        arms, reference = our_arms(models, sdpa, frames, args, make=make)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        peers = {
            "vendor_eager": vendor(
                models, sdpa, frames[: args.vendor_eager_frames], reference,
                graphs=False, seed=args.seed,
            ),
            "vendor_cudagraphed": vendor(
                models, sdpa, frames, reference, graphs=True, seed=args.seed
            ),
        }  # fmt: skip
        results[name] = kernel_result(sdpa, arms, peers, budget_ms)
        report = {
            **report_head(
                "python3 bench/moshi.py " + " ".join(sys.argv[1:]),
                f"moshi {size.name}",
                models,
                (build_s, weights_mib),
                budget_ms,
                args.frames,
            ),
            "operating_point": size.point,
            "kernels": results,
        }
        write_report(args.out / ("moshi_tiny.json" if args.tiny else "moshi_h200.json"), report)


if __name__ == "__main__":
    main()

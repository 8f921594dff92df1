"""The peers of bench/token2wav.py, in their own process (the vendor import mutates dynamo state).

- ``vendor_eager``: minicpmo-utils 1.0.7's own flow (our random weights loaded ``strict=True``,
  our noise) streaming with its own ``inference_chunk`` and ``Token2wav`` trims;
- ``vendor_rebucketed``: the same, with the vendor DiT's CUDA-graph branch re-bucketed to the live
  50-frame call (its own ``blocks_forward_chunk`` captured at chunk 50, padded to 500 frames), the
  way ANCHORS.md measured it — the stock buckets {30, 48, 96} never fire;
- ``torch_compile``: our DiT's ``forward_chunk`` under ``torch.compile(mode="reduce-overhead")``
  inside the stock stream (a few steady chunks: each new extent recompiles).

Each reports p50/p95/p99 over steady chunks, exact calls against our eager stream, and peak memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.token2wav.binding import bind_flow
from adapters.token2wav.checkpoint import load_token2wav
from adapters.token2wav.stock import StockStream
from bench.token2wav import (
    FAMILY,
    MIB,
    add_common_args,
    percentiles,
    timed,
    vendor_prompt,
    voice,
    windows,
)
from tests.oracle.vendor import vendor_flow, vendor_token2wav

BUCKET, PADDED = 50, 500


def rebucket(dit: Any) -> None:
    """Capture the vendor DiT's chunk graph at the live chunk size, as its own init does."""
    dtype, device = dit.cnn_cache_buffer.dtype, dit.cnn_cache_buffer.device
    zeros = lambda *shape, **kw: torch.zeros(shape, dtype=kw.get("dtype", dtype), device=device)  # noqa: E731
    static_in = [
        zeros(2, 320, BUCKET),
        zeros(2, 1, 512),
        torch.ones((2, BUCKET, PADDED + BUCKET), dtype=torch.bool, device=device),
        zeros(16, 2, 1024, 2),
        zeros(16, 2, 8, PADDED, 128),
    ]
    new_cnn, new_att = zeros(16, 2, 1024, 2), zeros(16, 2, 8, PADDED + BUCKET, 128)
    dit.blocks_forward_chunk(*static_in, new_cnn, new_att)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = dit.blocks_forward_chunk(*static_in, new_cnn, new_att)
    dit.graph_chunk[BUCKET] = graph
    dit.max_size_chunk[BUCKET] = PADDED
    dit.inference_buffers_chunk[BUCKET] = {
        "static_inputs": static_in,
        "static_outputs": [out, new_cnn, new_att],
    }
    dit.use_cuda_graph = True


class ReplayCount:
    """Replay hits and eager misses of the vendor DiT, per estimator call (one solver step).

    The vendor's ``forward_chunk`` replays its graph for a captured chunk size and runs
    ``blocks_forward_chunk`` eagerly otherwise; it counts neither, so both are wrapped on the
    instance. Install after :func:`rebucket` (its capture calls ``blocks_forward_chunk`` too).
    """

    def __init__(self, dit: Any) -> None:
        self.calls = self.eager = 0
        forward, blocks = dit.forward_chunk, dit.blocks_forward_chunk

        def counted_forward(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return forward(*args, **kwargs)

        def counted_blocks(*args: Any, **kwargs: Any) -> Any:
            self.eager += 1
            return blocks(*args, **kwargs)

        dit.forward_chunk, dit.blocks_forward_chunk = counted_forward, counted_blocks

    def reset(self) -> None:
        self.calls = self.eager = 0

    def figures(self) -> dict[str, Any]:
        misses = {"eager": self.eager} if self.eager else {}
        return {"replay_hits": self.calls - self.eager, "replay_misses": misses}


def reference_mels(flow: Any, args: argparse.Namespace, count: int) -> list[torch.Tensor]:
    """Our eager stream's mels for the benchmark's token stream (kept on the CPU)."""
    tokens, mel, spk = voice(args.prompt_tokens)
    stream = StockStream(flow, tokens, mel, spk, binding=bind_flow(FAMILY, mel.shape[1]))
    mels = []
    with torch.no_grad():
        for i, chunk in enumerate(windows(count)):
            if i % args.turn == 0:
                stream.reset()
            mels.append(stream.chunk(chunk).cpu())
    return mels


def expected_mels(flow: Any, args: argparse.Namespace, count: int) -> list[torch.Tensor]:
    """The first ``count`` reference mels: from ``--reference`` (saved by bench/token2wav.py's
    latency phase, same tokens and turns) or streamed here."""
    if args.reference is None:
        return reference_mels(flow, args, count)
    saved: list[torch.Tensor] = torch.load(args.reference, weights_only=True)
    assert len(saved) >= count, f"{args.reference} holds {len(saved)} mels, {count} are needed"
    return saved[:count]


def vendor_stream(args: argparse.Namespace, graphs: bool) -> dict[str, Any]:
    count = args.warm_turns * args.turn + args.chunks
    ours, _ = load_token2wav(None, seed=args.seed, device="cuda")
    theirs = vendor_flow(ours)
    expected = expected_mels(ours, args, count)
    del ours
    torch.cuda.empty_cache()
    trims = vendor_token2wav()
    if graphs:
        rebucket(theirs.decoder.estimator)
    replays = ReplayCount(theirs.decoder.estimator)
    tokens, mel, spk = voice(args.prompt_tokens)
    # The scope of bench/token2wav.py's memory phase: the peak counts the weights (with the stock
    # envelope) and everything after them; "held" is what the stream holds before its first call.
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        prompt, vendor = vendor_prompt(theirs, tokens, mel, spk)
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated() - weights
        times, exact = [], 0
        for i, chunk in enumerate(windows(count)):
            if i and i % args.turn == 0:  # the first turn's state is the clone made above
                vendor.stream_cache = {k: v.clone() for k, v in prompt.items()}

            def step(chunk: torch.Tensor = chunk) -> torch.Tensor:
                out, vendor.stream_cache = theirs.inference_chunk(
                    token=chunk, spk=spk, cache=vendor.stream_cache
                )
                trims._trim_estimator_cache(vendor, mel.shape[1])
                trims._trim_conformer_cache(vendor, mel.shape[1])
                out_mel: torch.Tensor = out
                return out_mel

            if i == args.warm_turns * args.turn:
                replays.reset()
            out, ms = timed(step)
            if i >= args.warm_turns * args.turn:
                times.append(ms)
                exact += bool(torch.equal(out.cpu(), expected[i]))
    figures = {"calls": len(times), "exact_calls": exact, **replays.figures()}
    scope = {
        "weights_mib": round(weights / MIB, 1),
        "held_before_streaming_mib": round(held / MIB, 1),
    }
    return {**percentiles(times), **figures, **peak(), **scope}


def compiled_stream(args: argparse.Namespace) -> dict[str, Any]:
    flow, _ = load_token2wav(None, seed=args.seed, device="cuda")
    expected = expected_mels(flow, args, args.compile_chunks)
    dit = flow.decoder.estimator
    dit.forward_chunk = torch.compile(dit.forward_chunk, mode="reduce-overhead")
    tokens, mel, spk = voice(args.prompt_tokens)
    torch.cuda.reset_peak_memory_stats()
    stream = StockStream(flow, tokens, mel, spk, binding=bind_flow(FAMILY, mel.shape[1]))
    times, exact, compile_s = [], 0, 0.0
    with torch.no_grad():
        for i, chunk in enumerate(windows(args.compile_chunks)):
            if i % args.turn == 0:
                stream.reset()
            out, ms = timed(lambda c=chunk: stream.chunk(c))
            if i < 3:  # the first visits of the three extents compile
                compile_s += ms / 1e3
                continue
            times.append(ms)
            exact += bool(torch.equal(out.cpu(), expected[i]))
    return {
        **percentiles(times),
        "calls": len(times),
        "exact_calls": exact,
        # cudagraph trees keep no hit counts a caller can read: not counted, said so.
        "replay_hits": None,
        "replay_misses": None,
        "compile_s": round(compile_s, 1),
        **peak(),
    }


def peak() -> dict[str, float]:
    return {
        "peak_allocated_mib": round(torch.cuda.max_memory_allocated() / MIB, 1),
        "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / MIB, 1),
    }


def guarded(fn: Any, *args: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        result: dict[str, Any] = fn(*args)
    except Exception as exc:  # a peer that fails is reported, not fatal to the benchmark
        result = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    add_common_args(parser)
    parser.add_argument("--out", type=Path, help="also write the peers here after each one")
    parser.add_argument(
        "--reference", type=Path, help="our eager mels of this stream (token2wav.py saves them)"
    )
    args = parser.parse_args()
    torch.backends.cudnn.deterministic = True
    runs = {
        "vendor_eager": lambda: guarded(vendor_stream, args, False),
        "vendor_rebucketed": lambda: guarded(vendor_stream, args, True),
        "torch_compile": lambda: guarded(compiled_stream, args),
    }
    peers: dict[str, Any] = {}
    for name, run in runs.items():
        peers[name] = run()
        if args.out is not None:
            args.out.write_text(json.dumps(peers, indent=2) + "\n")
    print(json.dumps(peers))


if __name__ == "__main__":
    main()

"""MiniCPM-o 4.5's backbone under the two rules: every arm exact, the vendor's agreement, time.

    python3 bench/minicpmo45_backbone.py --code DIR --out OUT/minicpmo45_backbone_h200.json
    python3 bench/minicpmo45_backbone.py --code DIR --out /tmp/b.json --device cpu --size tiny \\
        --units 6 --vendor-units 3 --timing-units 2

The checkpoint (random weights, the real public code) is written and loaded as
``bench/minicpmo45.py`` does (its helpers), under the eager arm with the stock envelope, so the
session can switch to every arm. Three phases, the JSON written after each (timing first: a
time limit may cut the run):

1. **timing** — per arm and for the vendor's loop: per-unit time (p50/p95/p99), the split
   audio encoder / LLM prefill / LLM decode / TTS head (device synchronized around each stage)
   and Token2Wav, replay counters, peak memory.
2. **exact** — per seed, one conversation of ``--units`` units of the demo talk under each arm
   (eager twice first for the first seed, the second over ``--again-units``: eager must
   reproduce itself), with a barge-in at
   ``--barge-at``, a new conversation at ``--new-at`` and the vendor's basic sliding window at
   ``--window`` marks (so slides happen). Per unit: the LLM's token ids fed (the vendor's
   ``total_ids``), the speech tokens handed to Token2Wav, the PCM, listen/speak. Every arm
   must equal eager (``torch.equal`` / byte equality); the first differing unit is named.
3. **vendor** — the vendor's own backbone (its ``StreamDecoder.feed`` with a ``DynamicCache``,
   its TTS head's transformers forward) against ours (eager arm) on the same weights and seed,
   greedy text and sampled: token agreement and the first divergence.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.face import ModelRequest
from adapters.minicpmo45.folder import TOKEN2WAV_FOLDER
from adapters.registry import family
from app.demo import talk_periods
from bench.env_info import environment
from bench.minicpmo45 import (
    SIZES,
    stage_seconds,
    stand_in_imports,
    write,
    write_checkpoint,
    write_token2wav,
)
from engine.arms import Arm
from engine.duplex import DuplexLoop
from engine.metrics import Metrics


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class Session:
    """The loaded family, its loop, and what one conversation produced."""

    def __init__(self, loaded: Any, device: str) -> None:
        self.loaded, self.device = loaded, device
        self.model = loaded.model
        self.backbone = self.model.backbone
        self.duplex = self.backbone.duplex
        self.rules = self.backbone.rules
        metrics = Metrics(self.model.period_s, device=device, arm="eager")
        self.loop = DuplexLoop(self.model, metrics, loaded.replay, None)

    def fresh_audio_encoder(self) -> None:
        """The vendor's ``prepare`` keeps its audio encoder's cache (``audio_past_key_values``)
        across conversations; each measured conversation starts without it, in every arm."""
        model = getattr(self.duplex, "model", None)
        if model is not None and hasattr(model, "audio_past_key_values"):
            model.audio_past_key_values = None

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)
        if self.device.startswith("cuda"):
            torch.cuda.manual_seed_all(seed)

    def conversation(
        self,
        arm: Arm,
        seed: int,
        talk: list[np.ndarray],
        *,
        barge_at: int = -1,
        new_at: int = -1,
        greedy: bool = False,
    ) -> list[dict[str, Any]]:
        """One conversation from a fresh start; per unit: digests and plain facts."""
        self.loop.request_arm(arm)
        self.loop.reset()
        self.fresh_audio_encoder()
        self.seed(seed)
        generate = self.duplex.streaming_generate
        if greedy:
            self.duplex.streaming_generate = functools.partial(generate, decode_mode="greedy")
        units: list[dict[str, Any]] = []
        try:
            for i, mic in enumerate(talk):
                if i == new_at:
                    self.loop.reset()
                    self.seed(seed + 1000)
                if i == barge_at:
                    self.backbone.interrupt()
                before = len(self.duplex.total_ids)
                outcome = self.loop.step(mic)
                ids = (
                    list(self.duplex.total_ids[before:])
                    if len(self.duplex.total_ids) >= before
                    else list(self.duplex.total_ids)
                )
                handoffs = self.backbone._handoffs
                speech = handoffs[0].tokens.reshape(-1).tolist() if handoffs else []
                units.append({
                    "phase": str(outcome.phase),
                    "ids": ids,
                    "speech": speech,
                    "pcm": digest(np.ascontiguousarray(outcome.pcm).tobytes()),
                    "slides": self.rules.window["slides"],
                    "unit_s": outcome.record.processing_s,
                    "synthesis_s": stage_seconds(outcome, "synthesis"),
                })  # fmt: skip
        finally:
            if greedy:
                self.duplex.streaming_generate = generate
        return units


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Unit-by-unit equality of ids, speech tokens, PCM and phase; the first differing unit."""
    keys = ("ids", "speech", "pcm", "phase")
    first = {
        k: next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x[k] != y[k]), None)
        for k in keys
    }
    return {"units": min(len(a), len(b)), "equal": all(v is None for v in first.values()),
            "first_difference": first}  # fmt: skip


def agreement(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Token agreement of the LLM's ids and the speech tokens, and where they first part."""
    out: dict[str, Any] = {}
    for key in ("ids", "speech"):
        flat_a = [(i, t) for i, u in enumerate(ours) for t in u[key]]
        flat_b = [(i, t) for i, u in enumerate(theirs) for t in u[key]]
        n = min(len(flat_a), len(flat_b))
        same = sum(x[1] == y[1] for x, y in zip(flat_a, flat_b, strict=False))
        first = next((j for j in range(n) if flat_a[j][1] != flat_b[j][1]), None)
        out[key] = {
            "tokens": n, "agree": same, "first_divergence_token": first,
            "first_divergence_unit": flat_a[first][0] if first is not None else None,
        }  # fmt: skip
    out["phases_equal"] = [u["phase"] for u in ours] == [u["phase"] for u in theirs]
    return out


def extent_cost(rules: Any, device: str, steps: int = 50) -> dict[str, Any]:
    """One LLM decode step replayed at the carry's full capacity and at 512 slots (same
    weights, same kernels but the attended extent): device ms per step, CUDA events."""
    from adapters.minicpmo45.kv import KVCarry
    from adapters.minicpmo45.llm_step import CarryStep
    from engine.replay import ReplayEngine
    from engine.signature import Catalog

    llm = rules.decoder.m
    out: dict[str, Any] = {}
    for capacity in (rules.llm_carry.capacity, 512):
        step = CarryStep(llm.model, capacity, rules.backend, head=llm.lm_head)
        layers, _, heads, cap, dim = step.carry_shape()
        carry = KVCarry(layers, heads, cap, dim, dtype=rules.llm_carry.buffer.dtype, device=device)
        engine = ReplayEngine(device)
        op = engine.register("extent", step.logits, catalog=Catalog.any(), aliased=["buffer"])
        x = torch.randn(1, 1, int(llm.config.hidden_size), dtype=carry.buffer.dtype, device=device)
        pos = torch.tensor([[capacity // 2]], device=device)
        with torch.no_grad():
            for _ in range(3):
                op(x, pos, pos[0], carry.buffer)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
                begin, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                begin.record()
                for _ in range(steps):
                    op(x, pos, pos[0], carry.buffer)
                end.record()
                torch.cuda.synchronize()
                ms = begin.elapsed_time(end) / steps
            else:
                t0 = time.perf_counter()
                for _ in range(steps):
                    op(x, pos, pos[0], carry.buffer)
                ms = (time.perf_counter() - t0) * 1e3 / steps
        out[str(capacity)] = {"ms_per_step": round(ms, 3), "replay": op.counters.to_dict()}
        del carry, engine, op
    return out


def quantiles(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64) * 1e3
    if a.size == 0:
        return {}
    q = {f"p{p}_ms": round(float(np.quantile(a, p / 100)), 2) for p in (50, 95, 99)}
    return q | {"max_ms": round(float(a.max()), 2), "n": int(a.size)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--size", default="released", choices=tuple(SIZES))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--arms", default="eager,SRc")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--units", type=int, default=40)
    parser.add_argument("--barge-at", type=int, default=9)
    parser.add_argument("--new-at", type=int, default=-2, help="-2: at units // 2 + 3")
    parser.add_argument("--window", default="300,240", help="the vendor's basic window marks")
    parser.add_argument("--again-units", type=int, default=26, help="eager's second run")
    parser.add_argument("--vendor-units", type=int, default=6)
    parser.add_argument("--timing-units", type=int, default=16)
    parser.add_argument("--settle", type=int, default=2)
    args = parser.parse_args(argv)
    arms = [Arm.parse(a) for a in args.arms.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    new_at = args.units // 2 + 3 if args.new_at == -2 else args.new_at
    cuda = args.device.startswith("cuda")
    work = args.work or Path(tempfile.mkdtemp(prefix="minicpmo45-"))
    stand_ins = stand_in_imports()
    folder = work / f"MiniCPM-o-4_5-random-{args.size}"
    build_s = write_checkpoint(args.code, folder, args.size, args.device, 0)
    decoder = "full" if cuda else "small"
    if decoder == "full":
        write_token2wav(folder / TOKEN2WAV_FOLDER, 0)
    request = ModelRequest(device=args.device, model_size=decoder, checkpoint=folder,
                           arm=Arm.EAGER, seed=0, trust_checkpoint_code=True)  # fmt: skip
    t0 = time.perf_counter()
    loaded = family("minicpmo45").load(request, lambda stage, fraction: None)
    s = Session(loaded, args.device)
    assert s.rules is not None, "the backbone rules were not installed"
    result: dict[str, Any] = {
        **environment(" ".join(["python3", "bench/minicpmo45_backbone.py", *(argv or sys.argv[1:])])),  # noqa: E501
        "size": args.size, "decoder": decoder, "import_stand_ins": stand_ins,
        "build_s": round(build_s, 1), "load_s": round(time.perf_counter() - t0, 1),
        "facts": loaded.facts, "carry": s.rules.stats()["carry"], "sdpa": s.rules.backend,
        "sdpa_refused": s.rules.backend_refused,
    }  # fmt: skip
    log = functools.partial(print, file=sys.stderr, flush=True)
    config = s.duplex.decoder._window_config
    default_marks = (config.basic_window_high_tokens, config.basic_window_low_tokens)

    # 0. the attended extent: full capacity against a small carry, one replayed decode step
    result["extent"] = extent_cost(s.rules, args.device, steps=50 if cuda else 3)
    log(f"extent: {json.dumps({k: v['ms_per_step'] for k, v in result['extent'].items()})}")
    write(args.out, result)

    # 1. timing: per unit and per stage, each arm and the vendor's loop
    timing: dict[str, Any] = {}
    talk = talk_periods(args.settle + args.timing_units, seeds[0])
    s.rules.timing = True
    for name in [*[str(a) for a in arms], "vendor"]:
        s.rules.use_vendor(name == "vendor")
        # the vendor's backbone beside our Token2Wav under the last arm: the split isolates it
        arm = arms[-1] if name == "vendor" else Arm.parse(name)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        s.rules.reset_stats()
        units = s.conversation(arm, seeds[0], talk)[args.settle :]
        st = s.rules.stats()
        per_unit = st["per_unit"][args.settle :]
        figures = {
            "unit": quantiles([u["unit_s"] for u in units]),
            "token2wav": quantiles([u["synthesis_s"] for u in units]),
            **{stage: quantiles([u.get(stage, 0.0) for u in per_unit])
               for stage in ("audio_encoder", "llm_prefill", "llm_decode", "tts_head")},
            "speaking_units": sum(u["phase"] == "speak" for u in units),
            "llm_tokens_per_unit": float(np.mean([len(u["ids"]) for u in units])),
            "speech_tokens_per_unit": float(np.mean([len(u["speech"]) for u in units])),
            "replay": st["replay"], "fallbacks": st["fallbacks"], "token2wav_arm": str(arm),
        }  # fmt: skip
        if cuda:
            figures["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            figures["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 2)
        timing[name] = figures
        shown = {k: figures[k] for k in ("unit", "llm_decode", "tts_head")}
        log(f"timing {name}: {json.dumps(shown)}")
        result["timing"] = timing
        write(args.out, result)
    s.rules.timing = False
    s.rules.use_vendor(False)

    # 2. exact: every arm equals eager (eager first proves itself reproducible)
    high, low = (int(x) for x in args.window.split(","))
    config.basic_window_high_tokens, config.basic_window_low_tokens = high, low
    exact: dict[str, Any] = {"window": [high, low], "barge_at": args.barge_at, "new_at": new_at}
    for seed in seeds:
        talk = talk_periods(args.units, seed)
        runs: dict[str, list[dict[str, Any]]] = {}
        again = ["eager-again"] if seed == seeds[0] else []  # eager reproduces itself
        order = ["eager", *again, *[str(a) for a in arms if a is not Arm.EAGER]]
        for name in order:
            arm = Arm.EAGER if name.startswith("eager") else Arm.parse(name)
            s.rules.reset_stats()
            heard = talk[: args.again_units] if name == "eager-again" else talk
            runs[name] = s.conversation(arm, seed, heard, barge_at=args.barge_at, new_at=new_at)
            st = s.rules.stats()
            cmp = compare(runs["eager"], runs[name])
            exact[f"seed{seed}/{name}"] = cmp | {
                "speaking_units": sum(u["phase"] == "speak" for u in runs[name]),
                "slides": st["window"]["slides"], "fallbacks": st["fallbacks"],
                "replay": st["replay"],
            }  # fmt: skip
            log(f"exact seed {seed} {name}: equal={cmp['equal']} {cmp['first_difference']} "
                f"slides={st['window']['slides']} fallbacks={st['fallbacks']}")  # fmt: skip
        result["exact"] = exact
        write(args.out, result)
    config.basic_window_high_tokens, config.basic_window_low_tokens = default_marks

    # 3. the vendor's own loop on the same weights: agreement, greedy and sampled
    vendor: dict[str, Any] = {}
    talk = talk_periods(args.vendor_units, seeds[0])
    for greedy in (True, False):
        ours = s.conversation(Arm.EAGER, seeds[0], talk, greedy=greedy)
        s.rules.use_vendor(True)
        theirs = s.conversation(Arm.EAGER, seeds[0], talk, greedy=greedy)
        s.rules.use_vendor(False)
        mode = "greedy" if greedy else "sampled"
        vendor[mode] = agreement(ours, theirs)
        log(f"vendor {mode}: {json.dumps(vendor[mode])}")
    result["vendor"] = vendor
    write(args.out, result)

    s.rules.use_vendor(False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""PersonaPlex per 80-ms frame: every arm against a PersonaPlex-style loop, in one process.

    python3 bench/personaplex.py OUT_DIR        # the released shapes, CUDA: personaplex_h200.json
    python3 bench/personaplex.py OUT_DIR --tiny # the small config on the CPU: proves the script

Seeded random weights at the released shapes (Moshi's 7B with ``dep_q`` 16 and PersonaPlex's
delays), a seeded recording as the voice (``--voice-frames``), a preset role, seeded noise in,
sampling on. For each temporal-step attention kernel in ``--kernels``:

- our stream, warmed and sealed as the app loads it, then per arm a reset (the prompt phase:
  ``reset_ms``; with the first frame, ``first_answer_ms``: the prompt's time to the first
  answer) and ``--frames`` frames: frame time p50/p95/p99, peak memory, replay counts, frames
  equal to eager's (tokens and speech, bit for bit); the floor and timelines as bench/moshi.py;
- the peers on the same weights: ``style_eager`` and ``style_cudagraphed``, PersonaPlex's own
  loop structure (:mod:`bench.personaplex_style`: a host-side offset, the delay cache written by
  slicing, its three functions graphed with the ``moshi`` package's ``CUDAGraphed``, Mimi's own
  graphs), the temporal kernel pinned as ours or not, compared with our eager frame by frame
  (prompt phase included: equal frames mean equal prompts too).
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any

import torch

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from adapters.moshi.checkpoint import MoshiModels, build_models
from adapters.moshi.regions import ring_shapes
from adapters.moshi.stream import MoshiStream
from adapters.personaplex.config import lm_kwargs
from adapters.personaplex.frame import PersonaPlexOps
from adapters.personaplex.prompt import PersonaPlexPrompt, Voice
from adapters.personaplex.voice import resolve_role
from bench.moshi import (
    MIB,
    bench_parser,
    kernel_result,
    kernel_sets,
    noise,
    our_arms,
    report_head,
    start,
    sync,
    write_report,
)
from bench.personaplex_style import style_peer
from engine.replay import ReplayEngine


def main() -> None:
    parser = bench_parser(__doc__, "personaplex")
    parser.add_argument("--style-eager-frames", type=int, default=40)
    parser.add_argument("--voice-frames", type=int, default=25, help="seeded voice (25: 2 s)")
    parser.add_argument("--role", default="assistant", help="a preset's name or free text")
    args = parser.parse_args()
    device, declaration, size, budget_ms = start(args, "personaplex")
    point = size.point
    spf = point["samples_per_frame"]
    command = "python3 bench/personaplex.py " + " ".join(sys.argv[1:])
    t0 = time.perf_counter()
    from moshi.models import loaders

    kwargs = lm_kwargs(size, loaders._lm_kwargs)
    models = build_models(size, None, device, args.seed, lm_kwargs=kwargs)
    sync(device)
    build_s = time.perf_counter() - t0
    weights_mib = torch.cuda.memory_allocated(device) / MIB if device.type == "cuda" else 0.0
    print(f"built {size.name} in {build_s:.1f} s ({weights_mib:.0f} MiB)", file=sys.stderr)
    g = torch.Generator().manual_seed(args.seed + 17)
    voice = Voice(
        "seeded recording", pcm=0.2 * torch.randn((1, 1, args.voice_frames * spf), generator=g)
    )
    role = resolve_role(args.role, None, models.lm.text_card)

    def make(m: MoshiModels, sdpa: str, replay: ReplayEngine, spf: int) -> MoshiStream:
        from moshi.models.lm import LMGen

        from engine.arms import Arm

        prompt = PersonaPlexPrompt(
            voice, role, pad_text=point["prompt_pad_text"], silence=point["prompt_silence_frames"]
        )
        return MoshiStream(
            m.mimi, LMGen(m.lm), replay=replay, arm=Arm.EAGER, samples_per_frame=spf,
            sdpa=sdpa, rings=ring_shapes(declaration, point), ops=PersonaPlexOps, prompt=prompt,
            name="personaplex",
        )  # fmt: skip

    frames = noise(args.frames, spf, device)
    results: dict[str, Any] = {}
    for name, sdpa in kernel_sets(args.kernels, declaration, device).items():
        arms, reference = our_arms(models, sdpa, frames, args, make=make)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        style = {"voice": voice, "role": role, "point": point, "seed": args.seed}
        peers = {
            "style_eager": style_peer(
                models, sdpa, frames[: args.style_eager_frames], reference, graphs=False, **style
            ),
            "style_cudagraphed": style_peer(models, sdpa, frames, reference, graphs=True, **style),
        }
        results[name] = kernel_result(sdpa, arms, peers, budget_ms)
        report = {
            **report_head(
                command,
                f"personaplex {size.name}",
                models,
                (build_s, weights_mib),
                budget_ms,
                args.frames,
            ),
            "prompt": {
                "voice_frames": args.voice_frames,
                "role": role.name,
                "role_tokens": len(role.tokens),
                "steps": args.voice_frames + len(role.tokens) + 2 * point["prompt_silence_frames"],
            },
            "operating_point": point,
            "kernels": results,
        }
        name = "personaplex_tiny.json" if args.tiny else "personaplex_h200.json"
        write_report(args.out / name, report)


if __name__ == "__main__":
    main()

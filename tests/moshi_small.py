"""Moshi streams for the tests: seeded random weights, seeded noise in (never zeros), the
vendor's own loop as the reference. CPU at the small size; the GPU tests pass ``full``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from adapters.moshi.checkpoint import MoshiModels, build_models
from adapters.moshi.config import size_for
from adapters.moshi.frame import vendor_graphs_off
from adapters.moshi.regions import ring_shapes
from adapters.moshi.stream import FrameOut, MoshiStream
from engine.arms import Arm
from engine.contract import Declaration
from engine.declaration_io import load_declaration
from engine.replay import ReplayEngine

DECLARATION = load_declaration("moshi")
SPF = DECLARATION.values()["samples_per_frame"]


def models(seed: int = 3, size: str = "small", device: str = "cpu") -> MoshiModels:
    return build_models(size_for(size, DECLARATION), None, torch.device(device), seed)


def make_stream(
    arm: Arm,
    *,
    seed: int = 3,
    size: str = "small",
    device: str = "cpu",
    sdpa: str = "default",
    replay: ReplayEngine | None = None,
) -> tuple[MoshiStream, ReplayEngine]:
    from moshi.models.lm import LMGen

    m = models(seed, size, device)
    replay = replay or ReplayEngine(device, strict=True, poison=True)
    rings = ring_shapes(DECLARATION, size_for(size, DECLARATION).point)
    stream = MoshiStream(
        m.mimi, LMGen(m.lm), replay=replay, arm=arm, samples_per_frame=SPF, sdpa=sdpa, rings=rings
    )
    return stream, replay


def noise(n: int, seed: int, device: str = "cpu") -> list[Tensor]:
    """``n`` frames of seeded noise with a speech-like level that comes and goes."""
    g = torch.Generator().manual_seed(seed)
    return [
        (0.05 + 0.3 * (i % 7 < 4)) * torch.randn((1, 1, SPF), generator=g).to(device)
        for i in range(n)
    ]


def run(
    stream: MoshiStream,
    frames: Sequence[Tensor],
    *,
    seed: int = 0,
    reset_at: Sequence[int] = (),
    switch: dict[int, Arm] | None = None,
) -> list[FrameOut]:
    """The stream over ``frames`` from a seeded generator, resets and arm switches on the way."""
    torch.manual_seed(seed)
    outs = []
    for i, frame in enumerate(frames):
        if i in reset_at:
            stream.reset()
        if switch and i in switch:
            stream.set_arm(switch[i])
        outs.append(stream.step(frame))
    return outs


def vendor_run(
    m: MoshiModels,
    frames: Sequence[Tensor],
    *,
    seed: int = 0,
    reset_at: Sequence[int] = (),
    sdpa: str = "default",
) -> list[tuple[Tensor | None, Tensor | None]]:
    """The ``moshi`` package's own loop (its graphs off): encode, ``LMGen.step``, decode; with
    ``sdpa`` pinned in its temporal step only, as our ``lm_step`` pins it."""
    from moshi.models.lm import LMGen

    if sdpa != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[sdpa]
        forward_text = m.lm.forward_text

        def pinned(*args: object) -> object:
            with sdpa_kernel([backend]):
                return forward_text(*args)

        m.lm.forward_text = pinned  # read when LMGen starts streaming
    gen = LMGen(m.lm)
    m.mimi.streaming_forever(1)
    gen.streaming_forever(1)
    torch.manual_seed(seed)
    outs: list[tuple[Tensor | None, Tensor | None]] = []
    device = next(m.lm.parameters()).device
    with vendor_graphs_off(device), torch.no_grad():
        for i, frame in enumerate(frames):
            if i in reset_at:
                m.mimi.reset_streaming()
                gen.reset_streaming()
            tokens = gen.step(m.mimi.encode(frame))
            if tokens is None:  # the first frame after a reset: nothing generated yet
                outs.append((None, None))
                continue
            outs.append((tokens.clone(), m.mimi.decode(tokens[:, 1:]).clone()))
    return outs


def first_difference(a: Sequence[FrameOut], b: Sequence[FrameOut]) -> str | None:
    """Where two runs first differ (tokens or speech), or None when equal bit for bit."""
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if not torch.equal(x.tokens, y.tokens):
            return (
                f"frame {i}: tokens {x.tokens.flatten().tolist()} != {y.tokens.flatten().tolist()}"
            )
        if (x.pcm is None) != (y.pcm is None):
            return f"frame {i}: speech present in one run only"
        if x.pcm is not None and not torch.equal(x.pcm, y.pcm):
            return f"frame {i}: speech differs by {(x.pcm - y.pcm).abs().max().item():.3g}"
    return None


def every_arm_exact(
    stream: MoshiStream, frames: Sequence[Tensor], seed: int, replays: list[int] | None = None
) -> dict[str, bool]:
    """Every arm over ``frames`` equals eager bit for bit across two resets (at the start and
    half way) and live switches (a third and two thirds in); a replay arm replays at least half
    of its frames (``replays[0]``: graph launches counted, CUDA; None on the CPU, where replay
    is simulated). Asserts; the per-arm verdicts."""
    n = len(frames)
    reset_at = (0, n // 2)
    stream.set_arm(Arm.EAGER)
    eager = run(stream, frames, seed=seed, reset_at=reset_at)
    exact: dict[str, bool] = {}
    for arm in (Arm.S, Arm.R, Arm.RC, Arm.SR, Arm.SRC):
        other = Arm.SRC if arm is not Arm.SRC else Arm.R
        before = replays[0] if replays else 0
        switch = {0: arm, n // 3: other, 2 * n // 3: arm}
        ours = run(stream, frames, seed=seed, reset_at=reset_at, switch=switch)
        difference = first_difference(eager, ours)
        exact[str(arm)] = difference is None
        assert difference is None, f"{arm}: {difference}"
        if arm.replay and replays is not None:
            assert replays[0] - before >= n // 2, f"{arm}: {replays[0] - before} replays"
    return exact


def digests_across_processes(module: str, frames: int, processes: int = 3) -> set[str]:
    """The distinct digests of ``processes`` runs of ``python -m module`` (CUDA, full size,
    ``frames`` frames of SRc, seed 0), each in its own process, at once."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", module, "--device", "cuda", "--size", "full"]
    cmd += ["--frames", str(frames), "--seed", "0", "--arm", "SRc"]
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    results = [json.loads(p.communicate(timeout=900)[0]) for p in runs]
    assert all(p.returncode == 0 for p in runs)
    return {r["digest"] for r in results}


def digest(outs: Sequence[FrameOut]) -> str:
    """A hash of a run's token stream and speech, bit for bit."""
    import hashlib

    h = hashlib.sha256()
    for out in outs:
        h.update(out.tokens.cpu().numpy().tobytes())
        if out.pcm is not None:
            h.update(out.pcm.cpu().numpy().tobytes())
    return h.hexdigest()


def digest_main(
    make: Callable[..., tuple[MoshiStream, ReplayEngine]],
    declaration: Declaration,
    doc: str | None,
    reset_at: Sequence[int] = (),
) -> None:
    """One run of ``make``'s stream in its own process (Moshi's and PersonaPlex's ``main``):
    parses ``--device --size --frames --seed --arm --sdpa`` and prints ``{"digest": ...,
    "frames": ..., "sdpa": ...}``."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default="small")
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arm", default="SRc")
    parser.add_argument("--sdpa", default=None, help="default: the declared kernel on CUDA")
    args = parser.parse_args()
    torch.set_num_threads(1)
    declared = declaration.operators["lm_step"].kernels.get("sdpa", "default")
    sdpa = args.sdpa or (declared if args.device.startswith("cuda") else "default")
    stream, _ = make(
        Arm.parse(args.arm), seed=args.seed, size=args.size, device=args.device, sdpa=sdpa
    )
    frames = noise(args.frames, seed=args.seed + 100, device=args.device)
    outs = run(stream, frames, seed=args.seed, reset_at=reset_at)
    print(json.dumps({"digest": digest(outs), "frames": len(outs), "sdpa": sdpa}))


def main() -> None:
    """One run in its own process: ``python -m tests.moshi_small --device cuda --size full
    --frames 500 --seed 0 --arm SRc`` prints ``{"digest": ..., "frames": ...}``."""
    digest_main(make_stream, DECLARATION, main.__doc__)


if __name__ == "__main__":
    main()

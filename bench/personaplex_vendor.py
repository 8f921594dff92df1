"""Our eager PersonaPlex stream against NVIDIA/personaplex's own code (outside CI, never committed).

    python3 bench/personaplex_vendor.py OUT_DIR          # released shapes, CUDA: *_h200.json
    python3 bench/personaplex_vendor.py OUT_DIR --tiny   # the small config on the CPU: *_tiny.json

PersonaPlex's package (``bench/kit.sh`` puts it in the ignored ``.vendor/personaplex/moshi``, at
its pinned commit) imports itself as ``moshi`` relatively, beside the PyPI ``moshi`` 0.2.13 we
run on: it is loaded here under another name (:data:`PACKAGE`), so both live in one process.
Its ``lm.py`` imports ``sphn`` (audio files) at the top; where that is not installed a stand-in
that refuses every call takes its place (the voice is handed over as samples, no file is read).

Both get the same weights (ours, seeded random, loaded into theirs: its attention keeps one
``in_proj_weight`` where ours keeps one matrix per step), the same voice prompt (a seeded
recording, or ``--voice stored``: seeded embeddings and delay cache), the same role, the same
seeded input and sampling seed, and the temporal step's attention kernel pinned as our
declaration pins it (math on the CPU). Then:

- ours: our eager stream (the prompt phase at its reset, then ``--frames`` frames);
- theirs: its ``LMGen`` loop as its server runs it (warm-up frames, ``reset_streaming``,
  ``step_system_prompts``, then per frame Mimi's encode, ``LMGen.step``, Mimi's decode), its
  graphs on (CUDA) and off (its ``no_cuda_graph``; on the CPU its compile off too), in the order
  ``--runs`` names them: ``graphs`` and ``eager`` with its own Mimi (our weights),
  ``graphs-our-mimi`` and ``eager-our-mimi`` with ours (a difference in its Mimi told apart).

The JSON: per run the frames compared, the exact frames (tokens and speech, bit for bit), the
first difference (frame, which output: ``text``, ``audio codebook k`` or ``speech``), frame time
p50/p95/p99 and the prompt phase's time.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import types
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from adapters.moshi.checkpoint import MoshiModels, build_models
from adapters.moshi.config import MoshiSize
from adapters.moshi.regions import ring_shapes
from adapters.moshi.stream import MoshiStream
from adapters.personaplex.config import lm_kwargs
from adapters.personaplex.frame import PersonaPlexOps
from adapters.personaplex.prompt import PersonaPlexPrompt, Voice
from adapters.personaplex.rings import personaplex_rings
from adapters.personaplex.voice import resolve_role
from bench.env_info import environment
from bench.moshi import (
    Frame,
    kernel_sets,
    noise,
    percentiles,
    pinned_forward_text,
    start,
    sync,
    timed_frames,
)
from engine.arms import Arm
from engine.replay import ReplayEngine

RUNS = ["graphs", "eager", "graphs-our-mimi", "eager-our-mimi"]
PACKAGE = "personaplex_moshi"  # PersonaPlex's `moshi`, under a name that clashes with nothing
CODE = Path(__file__).resolve().parent.parent / ".vendor" / "personaplex" / "moshi"


class VendorCodeMissing(RuntimeError):
    pass


def load_code(code: Path = CODE) -> types.ModuleType:
    """PersonaPlex's package from ``code`` (its ``moshi/moshi`` folder) as :data:`PACKAGE`."""
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    if not (code / "models" / "lm.py").is_file():
        raise VendorCodeMissing(
            f"PersonaPlex's code is not in {code}: run `bench/kit.sh . personaplex` (it puts "
            "NVIDIA/personaplex's package in .vendor/personaplex)"
        )
    if importlib.util.find_spec("sphn") is None:
        sys.modules["sphn"] = _no_sphn()
    spec = importlib.util.spec_from_file_location(
        PACKAGE, code / "__init__.py", submodule_search_locations=[str(code)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        raise
    return module


def _no_sphn() -> types.ModuleType:
    stand_in = types.ModuleType("sphn")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("sphn is not installed: this comparison hands the voice over as samples")

    stand_in.read = refuse  # type: ignore[attr-defined]
    stand_in.resample = refuse  # type: ignore[attr-defined]
    return stand_in


def _their_weights(theirs: dict[str, Any], ours: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Our state dict under their names: their fused projections are our per-step ones stacked."""
    mapped: dict[str, Any] = {}
    used: set[str] = set()
    for name in theirs:
        if name in ours:
            mapped[name] = ours[name]
            used.add(name)
            continue
        for suffix, part in (("in_proj_weight", "in_projs"), ("out_proj.weight", "out_projs")):
            if name.endswith(suffix):
                base = name.removesuffix(suffix)
                parts: list[torch.Tensor] = []
                while (key := f"{base}{part}.{len(parts)}.weight") in ours:
                    parts.append(ours[key])
                    used.add(key)
                if parts:
                    mapped[name] = torch.cat(parts, 0)
                break
        if name not in mapped:
            raise KeyError(f"PersonaPlex's {name} has no counterpart in our model")
    if unused := sorted(set(ours) - used):
        more = f" (and {len(unused) - 1} more)" if len(unused) > 1 else ""
        raise KeyError(f"our {unused[0]}{more} has no place in PersonaPlex's model")
    return mapped


def their_lm(pp: types.ModuleType, models: MoshiModels, size: MoshiSize) -> Any:
    """PersonaPlex's ``LMModel`` at our size with our weights (its extra arguments its own)."""
    from moshi.models import loaders

    ours = lm_kwargs(size, loaders._lm_kwargs)
    base = pp.models.loaders._lm_kwargs
    if missing := sorted(set(ours) - set(base)):
        raise KeyError(f"PersonaPlex's LMModel takes no {missing}")
    kwargs = {**base, **ours}
    param = next(models.lm.parameters())
    lm = pp.models.lm.LMModel(device=param.device, dtype=param.dtype, **kwargs)
    # as its loader does: some of its layers are made without the device and dtype given
    lm = lm.to(device=param.device, dtype=param.dtype)
    lm.load_state_dict(_their_weights(lm.state_dict(), models.lm.state_dict()), strict=True)
    if stray := {(str(t.device), t.dtype) for t in lm.state_dict().values()} - {
        (str(param.device), param.dtype)
    }:
        raise RuntimeError(f"PersonaPlex's LMModel holds weights as {sorted(map(str, stray))}")
    return lm.eval()


def their_mimi(pp: types.ModuleType, models: MoshiModels, size: MoshiSize) -> Any:
    """PersonaPlex's ``MimiModel`` built as its loader builds it, at our config, our weights."""
    from moshi.models import loaders

    config = size.mimi_config(loaders._mimi_config)
    seanet, transformer = config["seanet"], config["transformer"]
    modules = pp.modules
    encoder = modules.SEANetEncoder(**seanet)
    mimi = pp.models.compression.MimiModel(
        encoder,
        modules.SEANetDecoder(**seanet),
        pp.quantization.SplitResidualVectorQuantizer(**config["quantizer"]),
        channels=config["channels"],
        sample_rate=config["sample_rate"],
        frame_rate=config["frame_rate"],
        encoder_frame_rate=config["sample_rate"] / encoder.hop_length,
        causal=True,
        resample_method="conv",
        encoder_transformer=modules.transformer.ProjectedTransformer(**transformer),
        decoder_transformer=modules.transformer.ProjectedTransformer(**transformer),
    )
    mimi.load_state_dict(_their_weights(mimi.state_dict(), models.mimi.state_dict()), strict=True)
    mimi.set_num_codebooks(models.mimi.num_codebooks)
    return mimi.to(next(models.mimi.parameters()).device).eval()


def first_difference(outs: list[Frame | None], reference: list[Frame | None]) -> dict[str, Any]:
    """Exact frames and the first frame that differs, with which output."""
    exact, first = 0, None
    for i, (a, b) in enumerate(zip(outs, reference, strict=True)):
        what = _differs(a, b)
        exact += what is None
        if what is not None and first is None:
            first = {"frame": i, "output": what}
    return {"frames": len(outs), "exact_frames": exact, "first_difference": first}


def _differs(a: Frame | None, b: Frame | None) -> str | None:
    if a is None or b is None:
        return None if a is None and b is None else "a frame without tokens"
    if a[0].shape != b[0].shape:
        return f"token shape {tuple(a[0].shape)} against {tuple(b[0].shape)}"
    if not torch.equal(a[0], b[0]):
        k = int((a[0][0] != b[0][0]).reshape(a[0].shape[1], -1).any(-1).nonzero()[0])
        return "text" if k == 0 else f"audio codebook {k - 1}"
    if (a[1] is None) != (b[1] is None):
        return "speech (one side has none)"
    if a[1] is not None and not torch.equal(a[1], b[1]):  # type: ignore[arg-type]
        return "speech"
    return None


def ours_eager(
    models: MoshiModels,
    prompt: PersonaPlexPrompt,
    sdpa: str,
    frames: list[torch.Tensor],
    seed: int,
    rings: Mapping[str, tuple[int, ...]],
) -> tuple[list[Frame | None], dict[str, Any]]:
    """Our eager stream: the prompt phase at its reset, then the frames."""
    from moshi.models.lm import LMGen

    device = frames[0].device
    stream = MoshiStream(
        models.mimi, LMGen(models.lm), replay=ReplayEngine(device, strict=True, poison=True),
        arm=Arm.EAGER, samples_per_frame=frames[0].shape[-1], sdpa=sdpa, rings=rings,
        ops=PersonaPlexOps, prompt=prompt, name="personaplex",
    )  # fmt: skip
    try:
        torch.manual_seed(seed)
        sync(device)
        t0 = time.perf_counter()
        stream.reset()
        sync(device)
        reset_ms = (time.perf_counter() - t0) * 1e3

        def step(frame: torch.Tensor) -> Frame:
            out = stream.step(frame)
            return out.tokens.cpu(), None if out.pcm is None else out.pcm.cpu()

        outs, ms = timed_frames(step, frames, device)
    finally:
        stream.close()
    return list(outs), {**percentiles(ms[1:]), "reset_ms": round(reset_ms, 2)}


def theirs(
    pp: types.ModuleType,
    lm: Any,
    mimi: Any,
    prompt: PersonaPlexPrompt,
    sdpa: str,
    frames: list[torch.Tensor],
    *,
    seed: int,
    graphs: bool,
    warm: int,
) -> tuple[list[Frame | None], dict[str, Any]]:
    """Their loop as their server runs it: warm-up frames, a reset, the prompts, the frames."""
    device = frames[0].device
    compile_ = pp.utils.compile
    q = mimi.num_codebooks
    with ExitStack() as stack:
        if not graphs:
            stack.enter_context(compile_.no_cuda_graph())
            if device.type != "cuda":
                stack.enter_context(compile_.no_compile())
        stack.enter_context(torch.no_grad())
        stack.enter_context(pinned_forward_text(lm, sdpa, ("forward_codes", "forward_embeddings")))
        gen = pp.models.lm.LMGen(
            lm, device=device, audio_silence_frame_cnt=prompt.silence,
            text_prompt_tokens=list(prompt.role.tokens), sample_rate=int(mimi.sample_rate),
            frame_rate=mimi.frame_rate,
        )  # fmt: skip
        voice = prompt.voice
        if voice is not None and voice.embeddings is not None:
            gen.voice_prompt_embeddings = voice.embeddings.to(
                device=device, dtype=next(lm.parameters()).dtype
            )
            assert voice.cache is not None
            gen.voice_prompt_cache = voice.cache.to(device)
        elif voice is not None and voice.pcm is not None:
            gen.voice_prompt_audio = voice.pcm[0].numpy()
        mimi.streaming_forever(1)
        personaplex_rings(mimi)  # our Mimi (its own has its fork's rings already): as our stream's
        gen.streaming_forever(1)

        def step(frame: torch.Tensor) -> Frame | None:
            tokens = gen.step(mimi.encode(frame))
            if tokens is None:
                return None
            return tokens.cpu(), mimi.decode(tokens[:, 1 : 1 + q]).cpu()

        timed_frames(step, frames[:warm], device)  # its graphs capture here, as its server warms
        torch.manual_seed(seed)
        sync(device)
        t0 = time.perf_counter()
        mimi.reset_streaming()
        gen.reset_streaming()
        gen.step_system_prompts(mimi)
        mimi.reset_streaming()
        sync(device)
        reset_ms = (time.perf_counter() - t0) * 1e3
        outs, ms = timed_frames(step, frames, device)
        mimi._stop_streaming()
        gen._stop_streaming()
    return list(outs), {**percentiles(ms[1:]), "reset_ms": round(reset_ms, 2)}


def _voice(kind: str, frames: int, spf: int, lm: Any, seed: int) -> Voice:
    g = torch.Generator().manual_seed(seed + 17)
    if kind == "recording":
        return Voice("seeded recording", pcm=0.2 * torch.randn((1, 1, frames * spf), generator=g))
    embeddings = 0.5 * torch.randn((frames, 1, 1, lm.dim), generator=g)
    width = max(lm.delays) + 3
    cache = torch.randint(0, lm.card, (1, lm.num_codebooks, width), generator=g)
    return Voice("seeded stored voice", embeddings=embeddings, cache=cache)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder for personaplex_vendor_h200.json (or _tiny)")
    p.add_argument("--tiny", action="store_true", help="the small config on the CPU")
    p.add_argument("--frames", type=int, default=500, help="frames compared (default 500)")
    p.add_argument("--their-eager-frames", type=int, help="their graphs-off run (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--their-seed", type=int, help="their sampling seed (default --seed; another: a control "
        "that must differ)",
    )  # fmt: skip
    p.add_argument("--voice", choices=["recording", "stored"], default="recording")
    p.add_argument("--voice-frames", type=int, default=25, help="the seeded voice (25: 2 s)")
    p.add_argument("--role", default="assistant", help="a preset's name or free text")
    p.add_argument(
        "--runs", nargs="+", choices=RUNS, default=["graphs", "eager"],
        help="their loop's runs, in order (default: graphs eager)",
    )  # fmt: skip
    p.add_argument("--warm", type=int, default=4, help="their warm-up frames before the reset")
    p.add_argument("--code", type=Path, default=CODE, help="PersonaPlex's moshi package folder")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    pp = load_code(args.code)
    device, declaration, size, _ = start(args, "personaplex")
    point = size.point
    sdpa = kernel_sets(["pinned"], declaration, device)["pinned"]
    from moshi.models import loaders

    t0 = time.perf_counter()
    models = build_models(
        size, None, device, args.seed, lm_kwargs=lm_kwargs(size, loaders._lm_kwargs)
    )
    lm = their_lm(pp, models, size)
    mimis = {"theirs": their_mimi(pp, models, size), "ours": models.mimi}
    sync(device)
    build_s = time.perf_counter() - t0
    spf = point["samples_per_frame"]
    voice = _voice(args.voice, args.voice_frames, spf, models.lm, args.seed)
    prompt = PersonaPlexPrompt(
        voice, resolve_role(args.role, None, models.lm.text_card),
        pad_text=point["prompt_pad_text"], silence=point["prompt_silence_frames"],
    )  # fmt: skip
    frames = noise(args.frames, spf, device, seed=args.seed + 7)
    name = f"personaplex_vendor_{'tiny' if args.tiny else 'h200'}.json"
    command = "python3 bench/personaplex_vendor.py " + " ".join(argv or sys.argv[1:])
    report: dict[str, Any] = {
        **environment(command),
        "model": f"personaplex {size.name}, seeded random weights (ours, loaded into theirs)",
        "vendor": _vendor_commit(args.code),
        "package": PACKAGE,
        "sdpa": sdpa,
        "build_s": round(build_s, 1),
        "prompt": {
            "voice": args.voice,
            "voice_frames": args.voice_frames,
            "role": prompt.role.name,
            "role_tokens": len(prompt.role.tokens),
            "silence_frames": prompt.silence,
        },
        "seed": args.seed,
        "frames": args.frames,
        "runs": {},
    }
    rings = ring_shapes(declaration, point)
    reference, ours = ours_eager(models, prompt, sdpa, frames, args.seed, rings)
    report["runs"]["ours_eager"] = {"frames": args.frames, **ours}
    _write(args.out / name, report)
    their_seed = args.seed if args.their_seed is None else args.their_seed
    report["their_seed"] = their_seed
    for run in args.runs:
        key = "theirs_" + run.replace("-", "_")
        graphs, mimi = run.startswith("graphs"), "ours" if run.endswith("our-mimi") else "theirs"
        if graphs and device.type != "cuda":
            report["runs"][key] = {"not_run": "its CUDAGraphed is CUDA only"}
            _write(args.out / name, report)
            continue
        n = args.frames if graphs else (args.their_eager_frames or args.frames)
        try:
            outs, timing = theirs(
                pp, lm, mimis[mimi], prompt, sdpa, frames[:n], seed=their_seed, graphs=graphs,
                warm=args.warm,
            )  # fmt: skip
        except Exception as error:  # their graphs on a torch they were not written for: recorded
            if not graphs:
                raise
            report["runs"][key] = {"mimi": mimi, "error": f"{type(error).__name__}: {error}"[:400]}
            print(f"{key} failed: {error!r}", file=sys.stderr)
            _write(args.out / name, report)
            continue
        result = {"mimi": mimi, **first_difference(outs, reference[:n]), **timing}
        report["runs"][key] = result
        print(f"{key}: {result}", file=sys.stderr)
        _write(args.out / name, report)
    return report


def _vendor_commit(code: Path) -> str:
    stamp = code.parent / "COMMIT"
    return stamp.read_text().strip() if stamp.is_file() else "unknown"


def _write(file: Path, report: dict[str, Any]) -> None:
    import json

    file.write_text(json.dumps(report, indent=2) + "\n")
    print(file, file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except VendorCodeMissing as error:
        raise SystemExit(f"personaplex_vendor: {error}") from None

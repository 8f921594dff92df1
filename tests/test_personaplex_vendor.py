"""Our eager PersonaPlex stream equals NVIDIA/personaplex's own ``LMGen`` loop (outside CI).

Runs ``bench/personaplex_vendor.py --tiny`` on the CPU at the small config: PersonaPlex's package
(fetched by ``bench/kit.sh`` into the ignored ``.vendor/personaplex``, loaded under another name
beside the PyPI ``moshi``) on our seeded random weights, the same voice prompt, role, seeded
input and sampling seed, the temporal kernel pinned (math on the CPU). Skipped where the code is
absent, as in CI. The released shapes run on the H200 (bench/README.md, PersonaPlex). What the
report says of a difference, and how our weights are laid into theirs, is checked everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CODE = Path(__file__).resolve().parents[1] / ".vendor" / "personaplex" / "moshi"

needs_code = pytest.mark.skipif(
    not (CODE / "models" / "lm.py").is_file(),
    reason="needs PersonaPlex's code in .vendor/personaplex (bench/kit.sh . personaplex)",
)

FRAMES = 8


def _run(tmp_path: Path, *extra: str, run: str = "eager") -> dict[str, object]:
    from bench.personaplex_vendor import main

    args = [str(tmp_path), "--tiny", "--frames", str(FRAMES), "--voice-frames", "5"]
    args += ["--role", "casual", "--seed", "1", "--runs", "graphs", run, *extra]
    report = main(args)
    assert json.loads((tmp_path / "personaplex_vendor_tiny.json").read_text()) == report
    runs = report["runs"]
    assert isinstance(runs, dict)
    assert runs["theirs_graphs"] == {"not_run": "its CUDAGraphed is CUDA only"}
    theirs = runs["theirs_" + run.replace("-", "_")]
    assert isinstance(theirs, dict)
    return theirs


@needs_code
@pytest.mark.timeout(600)  # tens of seconds of CPU a case: outside CI only
@pytest.mark.parametrize(
    ("voice", "run"),
    [("recording", "eager"), ("stored", "eager-our-mimi")],
    ids=["recording", "stored"],
)
def test_our_eager_equals_personaplex_own_loop(tmp_path: Path, voice: str, run: str) -> None:
    """Every frame equal, tokens and speech (the prompt phase included: a different prompt
    leaves a different state), with PersonaPlex's Mimi or ours."""
    theirs = _run(tmp_path, "--voice", voice, run=run)
    assert theirs["mimi"] == ("ours" if run.endswith("our-mimi") else "theirs")
    assert theirs["first_difference"] is None
    assert theirs["exact_frames"] == theirs["frames"] == FRAMES


@needs_code
@pytest.mark.timeout(600)
def test_another_sampling_seed_is_told_apart(tmp_path: Path) -> None:
    """The control: their loop drawing from another seed differs, and the report says where."""
    theirs = _run(tmp_path, "--their-seed", "2")
    first = theirs["first_difference"]
    assert isinstance(first, dict) and first["output"], first
    assert theirs["exact_frames"] < FRAMES


@needs_code
@pytest.mark.timeout(600)
def test_our_eager_compiles_what_personaplex_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA both packages compile some functions (``torch_compile_lazy``) and run the rest
    eager; a function compiled on one side only rounds differently there (the H200 run at the
    released shapes differed at frame 1: moshi 0.2.13 compiles ``_rms_norm``, PersonaPlex does
    not). The CPU turns compile off, so here compile is left on as on CUDA and ``torch.compile``
    is a stand-in whose functions nudge every float they return: a function compiled on one
    side only changes that side's values, and the tokens part at once."""
    import contextlib

    import moshi.modules.transformer
    import moshi.utils.compile
    import torch

    from bench.personaplex_vendor import load_code

    pp = load_code()
    for module in (
        moshi.utils.compile,
        moshi.modules.transformer,
        pp.utils.compile,
        pp.modules.transformer,
    ):  # the switches CUDA leaves on (their layers', the CPU's in both loops); not Mimi's
        monkeypatch.setattr(module, "no_compile", contextlib.nullcontext)
    seen: set[str] = set()
    monkeypatch.setattr(torch, "compile", lambda fn, *a, **k: _nudging_compile(fn, seen))
    compiled = _lazy_compiled(("moshi.", pp.__name__ + "."))
    if not compiled:
        pytest.skip("NO_TORCH_COMPILE is set: nothing is compiled lazily")
    for cell in compiled:  # compiled afresh under the stand-in, and put back after
        monkeypatch.setattr(cell, "cell_contents", None)
    theirs = _run(tmp_path, run="eager")
    assert theirs["first_difference"] is None
    assert theirs["exact_frames"] == theirs["frames"] == FRAMES
    both = {"gating_forward_kernel", "apply_rope"}  # compiled on both sides, so nudged alike
    assert {f"{p}.{f}" for p in ("moshi", pp.__name__) for f in both} <= seen, seen


def _nudging_compile(fn: object, seen: set[str]) -> object:
    """``torch.compile``'s stand-in: ``fn`` with every float it returns nudged by 2**-6."""
    import torch

    seen.add(f"{fn.__module__.split('.')[0]}.{fn.__qualname__}")  # type: ignore[attr-defined]

    def nudge(value: object) -> object:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value + value * 2**-6
        if isinstance(value, tuple):
            return tuple(nudge(v) for v in value)
        return value

    def compiled(*a: object, **k: object) -> object:
        return nudge(fn(*a, **k))  # type: ignore[operator]

    return compiled


def _lazy_compiled(prefixes: tuple[str, ...]) -> list[object]:
    """The cells holding ``torch_compile_lazy``'s compiled function, in the loaded modules."""
    import inspect
    import sys

    cells: list[object] = []
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith(prefixes):
            continue
        values = list(vars(module).values())
        values += [v for c in values if inspect.isclass(c) for v in vars(c).values()]
        for value in values:
            code = getattr(value, "__code__", None)
            if code is None or "fun_compiled" not in code.co_freevars or id(value) in seen:
                continue
            seen.add(id(value))
            cells.append(value.__closure__[code.co_freevars.index("fun_compiled")])
    return cells


def test_the_first_difference_names_its_output() -> None:
    import torch

    from bench.personaplex_vendor import first_difference

    g = torch.Generator().manual_seed(3)
    tokens = [torch.randint(0, 2048, (1, 17, 1), generator=g) for _ in range(4)]
    pcm = [torch.randn((1, 1, 1920), generator=g) for _ in range(4)]
    reference = [(t, p) for t, p in zip(tokens, pcm, strict=True)]
    assert first_difference(list(reference), reference) == {
        "frames": 4, "exact_frames": 4, "first_difference": None,
    }  # fmt: skip
    for k, output in [(0, "text"), (1, "audio codebook 0"), (16, "audio codebook 15")]:
        changed = tokens[2].clone()
        changed[0, k, 0] += 1
        outs = [*reference[:2], (changed, pcm[2]), reference[3]]
        assert first_difference(outs, reference)["first_difference"] == {
            "frame": 2, "output": output,
        }  # fmt: skip
    speech = pcm[1].clone()
    speech[0, 0, 7] = speech[0, 0, 7] + 1e-3
    outs = [reference[0], (tokens[1], speech), *reference[2:]]
    result = first_difference(outs, reference)
    assert result["exact_frames"] == 3
    assert result["first_difference"] == {"frame": 1, "output": "speech"}


def test_our_per_step_projections_are_stacked_into_theirs() -> None:
    import torch

    from bench.personaplex_vendor import _their_weights

    ours = {
        f"layers.0.self_attn.in_projs.{i}.weight": torch.full((2, 3), float(i)) for i in range(3)
    }
    ours["layers.0.self_attn.out_projs.0.weight"] = torch.ones(3, 2)
    ours["emb.weight"] = torch.zeros(4, 3)
    theirs = dict.fromkeys(
        ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.out_proj.weight", "emb.weight"]
    )
    mapped = _their_weights(theirs, ours)
    assert torch.equal(
        mapped["layers.0.self_attn.in_proj_weight"],
        torch.cat([ours[f"layers.0.self_attn.in_projs.{i}.weight"] for i in range(3)]),
    )
    assert mapped["emb.weight"] is ours["emb.weight"]
    with pytest.raises(KeyError, match=r"text_linear\.weight has no counterpart"):
        _their_weights({**theirs, "text_linear.weight": None}, ours)
    with pytest.raises(KeyError, match=r"our extra\.weight has no place"):
        _their_weights(theirs, {**ours, "extra.weight": torch.zeros(1)})

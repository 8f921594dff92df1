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

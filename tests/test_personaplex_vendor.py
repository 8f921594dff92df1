"""Our eager PersonaPlex stream equals NVIDIA/personaplex's own ``LMGen`` loop (outside CI).

Runs ``bench/personaplex_vendor.py --tiny`` on the CPU at the small config: PersonaPlex's package
(fetched by ``bench/kit.sh`` into the ignored ``.vendor/personaplex``, loaded under another name
beside the PyPI ``moshi``) on our seeded random weights, the same voice prompt, role, seeded
input and sampling seed, the temporal kernel pinned (math on the CPU). Skipped where the code is
absent, as in CI. The released shapes run on the H200 (bench/README.md, PersonaPlex).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CODE = Path(__file__).resolve().parents[1] / ".vendor" / "personaplex" / "moshi"

pytestmark = pytest.mark.skipif(
    not (CODE / "models" / "lm.py").is_file(),
    reason="needs PersonaPlex's code in .vendor/personaplex (bench/kit.sh)",
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


@pytest.mark.timeout(600)
def test_another_sampling_seed_is_told_apart(tmp_path: Path) -> None:
    """The control: their loop drawing from another seed differs, and the report says where."""
    theirs = _run(tmp_path, "--their-seed", "2")
    first = theirs["first_difference"]
    assert isinstance(first, dict) and first["output"], first
    assert theirs["exact_frames"] < FRAMES

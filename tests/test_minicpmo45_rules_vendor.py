"""The backbone rules on the real public MiniCPM-o 4.5 code at a tiny config (outside CI).

Runs ``bench/minicpmo45.py``'s exactness phases on the CPU at ``--size tiny``: the public code
(OpenBMB/MiniCPM-o-Demo ``MiniCPMO45/`` with the ``as_duplex`` shim, in the ignored
``.vendor/minicpmo45``) under transformers 4.51 (a separate environment on ``PYTHONPATH``).
Skipped where either is absent, as in CI. Every arm must equal eager over two seeds, across
window slides, a barge-in and a new conversation; greedy text agrees with the vendor's loop.
"""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

CODE = Path(__file__).resolve().parents[1] / ".vendor" / "minicpmo45"


def _transformers() -> str:
    try:
        return version("transformers")
    except PackageNotFoundError:
        return ""


pytestmark = [
    pytest.mark.skipif(
        not _transformers().startswith("4.51."),
        reason="needs transformers 4.51 (the checkpoint code's pin) on PYTHONPATH",
    ),
    pytest.mark.skipif(
        not (CODE / "modeling_minicpmo.py").is_file(),
        reason="needs the public model code in .vendor/minicpmo45 (bench/README.md)",
    ),
]


@pytest.mark.timeout(1800)  # minutes of CPU on a loaded 2-core box: outside CI only
def test_every_arm_equals_eager_on_the_public_code(tmp_path: Path) -> None:
    from bench.minicpmo45 import main

    out = tmp_path / "backbone.json"
    args = ["--code", str(CODE), "--out", str(out), "--device", "cpu", "--size", "tiny"]
    args += ["--phases", "exact,vendor", "--exact-units", "5", "--again-units", "5"]
    args += ["--barge-at", "1", "--new-at", "3", "--window", "60,45", "--vendor-units", "2"]
    args += ["--exact-seeds", "0,1", "--arms", "eager"]
    assert main([*args, "--work", str(tmp_path)]) == 0
    result = json.loads(out.read_text())
    runs = {k: v for k, v in result["exact"].items() if "/" in k}
    assert set(runs) == {
        "seed0/eager",
        "seed0/eager-again",
        "seed0/SRc",
        "seed1/eager",
        "seed1/SRc",
    }
    for name, run in runs.items():
        assert run["equal"], (name, run["first_difference"])
        assert run["slides"] > 0 and set(run["fallbacks"]) == {"window_upkeep_eager"}, name
    greedy = result["vendor"]["greedy"]
    assert greedy["ids"]["agree"] == greedy["ids"]["tokens"] > 0

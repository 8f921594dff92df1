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
from typing import Any

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


@pytest.mark.parametrize("mode", ["sampling", "greedy"])
def test_the_device_decode_equals_the_public_codes_decode(mode: str) -> None:
    """``DeviceDecode`` against the public code's own ``StreamDecoder.decode`` (its function, on
    a decoder holding the released vocabulary's special ids), 100 tokens: the same id and the
    same generator state after every token, the chunk-eos branch taken and not."""
    import importlib.util
    from types import SimpleNamespace

    import torch

    from adapters.minicpmo45.sample import DeviceDecode

    spec = importlib.util.spec_from_file_location("mo45_public_utils", CODE / "utils.py")
    assert spec is not None and spec.loader is not None
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    vocab = 151748

    def decoder() -> Any:
        return SimpleNamespace(
            chunk_eos_id=vocab - 1, turn_eos_id=vocab - 2, listen_id=vocab - 3,
            special_token_ids=list(range(vocab - 40, vocab)),
            forbidden_token_ids=[vocab - 5, vocab - 1],
            generated_tokens=[], generated_special_tokens=[], context="",
            tokenizer=SimpleNamespace(decode=lambda *a, **k: ""),
        )  # fmt: skip

    vendor, ours = decoder(), decoder()
    sampler = DeviceDecode(ours, vocab, 512, torch.device("cpu"))
    g = torch.Generator().manual_seed(5)
    torch.manual_seed(6)
    taken = 0
    for t in range(100):
        logits = torch.randn(1, vocab, generator=g) * 3
        logits[0, torch.randint(0, 300, (8,), generator=g)] += 9  # repeats likely
        logits[0, vocab - 1] += 14 if t % 4 == 2 else 0  # chunk-eos drawn first now and then
        logits[0, vocab - 2] += 12 * (1 if t % 2 else -1)  # turn-eos of both signs, in the top-k
        logits = logits.to(torch.bfloat16)
        state = torch.get_rng_state()
        want = int(utils.StreamDecoder.decode(vendor, logits, mode=mode).item())
        after = torch.get_rng_state()
        torch.set_rng_state(state)
        sampler.mirror()
        got = int(
            sampler.step(logits, sampler.ring, sampler.count, mode, 0.7, 20, 0.8, 1.0, 1.05, 1.1)
        )
        if got == sampler.eos and mode == "sampling":
            sampler.rewind(state, logits)
        sampler.took(got, got == sampler.eos)
        assert got == want, t
        assert torch.equal(torch.get_rng_state(), after), t
        taken += got == sampler.eos
    assert ours.generated_tokens == vendor.generated_tokens
    assert mode == "greedy" or taken >= 2, taken

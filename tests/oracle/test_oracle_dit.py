"""Our ``DiT.forward_chunk`` equals the vendor's bit for bit, with and without caches.

Same random weights (every parameter random: ours, loaded into the vendor's module with
``strict=True``, which also proves the checkpoint names and shapes match), same random inputs and
random caches; ``torch.equal`` on the velocity and on both new caches, for the stock frequency table
(rebuilt on the CPU per call) and the device-resident one.

CPU: the full-size DiT (depth 16, hidden 512: the vendor's envelope is hard-coded to that size) on
50-frame chunks with no cache and with caches of 40 and 137 frames. GPU: the operating point, no
cache and the attended extents before each steady call, P = 302, 352, 402.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.token2wav.dit import DiT
from adapters.weights import randomize_
from tests.oracle.vendor import require_vendor, vendor_dit

pytestmark = pytest.mark.oracle

FRAMES = 50


def build_pair(device: str) -> tuple[DiT, Any]:
    """Our random full-size DiT and the vendor's, holding our weights."""
    require_vendor()
    ours = DiT()
    randomize_(ours, seed=21)
    theirs = vendor_dit()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    return ours.to(device).eval(), theirs.to(device).eval()


def compare(ours: DiT, theirs: Any, past: int | None, device: str) -> None:
    generator = torch.Generator().manual_seed(100 + (past or 0))

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator).to(device)

    x, mu, cond, spks = (
        randn(2, 80, FRAMES),
        randn(2, 80, FRAMES),
        randn(2, 80, FRAMES),
        randn(2, 80),
    )
    t = torch.rand(2, generator=generator).to(device)
    cnn = None if past is None else randn(16, 2, 1024, 2)
    att = None if past is None else randn(16, 2, 8, past, 128)
    with torch.inference_mode():
        expected = [y.clone() for y in theirs.forward_chunk(x, mu, t, spks, cond, cnn, att)]
        for resident in (False, True):
            got = ours.forward_chunk(x, mu, t, spks, cond, cnn, att, resident=resident)
            for name, a, b in zip(
                ("velocity", "cnn cache", "att cache"), expected, got, strict=True
            ):
                assert a.shape == b.shape, f"{name}: shape {b.shape} != vendor {a.shape}"
                assert torch.equal(a, b), f"{name} differs (past={past}, resident={resident})"


@pytest.fixture(scope="module")
def cpu_pair() -> tuple[DiT, Any]:
    return build_pair("cpu")


@pytest.mark.parametrize("past", [None, 40, 137])
def test_dit_forward_chunk_equals_vendor_cpu(cpu_pair: tuple[DiT, Any], past: int | None) -> None:
    compare(*cpu_pair, past, "cpu")


@pytest.mark.gpu
def test_dit_forward_chunk_equals_vendor_gpu() -> None:
    ours, theirs = build_pair("cuda")
    for past in (None, 302, 352, 402):
        compare(ours, theirs, past, "cuda")


def test_peer_replay_count_sees_the_vendors_eager_calls(cpu_pair: tuple[DiT, Any]) -> None:
    """bench/token2wav_peers.py reports replay hits for the vendor's own graph branch by counting
    its estimator calls and the eager ``blocks_forward_chunk`` runs among them; here (no graph
    captured) every call must count as an eager miss, and the outputs must be unchanged."""
    from bench.token2wav_peers import ReplayCount

    _, theirs = build_pair("cpu")
    count = ReplayCount(theirs)
    compare(cpu_pair[0], theirs, 40, "cpu")  # still the vendor's bits, through the wrappers
    assert count.figures() == {"replay_hits": 0, "replay_misses": {"eager": 1}}
    count.reset()
    assert count.figures() == {"replay_hits": 0, "replay_misses": {}}

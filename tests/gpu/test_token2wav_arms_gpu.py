"""On the GPU, at the released sizes: every arm equals eager bit for bit on every call.

Full-size flow (seeded random weights, fp32), 10 solver steps; the default voice (P = 302) and a
second voice (P = 250) with MiniCPM-o's 28-token windows, and Lychee-FD's 13-token windows; turn
resets, flushes and last chunks included. Replay arms must replay every steady call after warm-up.
"""

from __future__ import annotations

import pytest
import torch

from adapters.token2wav.checkpoint import load_token2wav
from engine.arms import ARMS, Arm
from engine.replay import ReplayEngine
from tests.gpu_results import record
from tests.token2wav_small import exact_calls, make_stream, random_voice, run_calls, token_calls

pytestmark = pytest.mark.gpu

MINICPM = [28] * 6 + [13, "last:4", "reset"] + [28] * 5 + ["last:10", "reset"] + [28] * 6
LYCHEE = [13] * 10 + ["last:5", "reset"] + [13] * 8


@pytest.fixture(scope="module")
def flow():
    torch.backends.cudnn.deterministic = True
    flow, _ = load_token2wav(None, seed=11, device="cuda")
    return flow


@pytest.mark.parametrize(
    ("declaration", "prompt_tokens", "pattern"),
    [("minicpmo45", 151, MINICPM), ("minicpmo45", 125, MINICPM), ("lycheefd", 151, LYCHEE)],
    ids=["minicpmo45-P302", "minicpmo45-P250", "lycheefd-P302"],
)
def test_every_arm_is_bit_exact(flow, declaration: str, prompt_tokens: int, pattern) -> None:
    voice = random_voice(prompt_tokens, seed=prompt_tokens, device="cuda")
    calls = token_calls(pattern, seed=5, device="cuda")
    off = ReplayEngine("cuda", enabled=False)
    eager = make_stream(flow, voice, Arm.EAGER, off, n_steps=10, family=declaration)
    reference = run_calls(eager, calls)
    for arm in ARMS[1:]:
        replay = ReplayEngine("cuda")
        stream = make_stream(flow, voice, arm, replay, n_steps=10, family=declaration)
        exact = exact_calls(stream, calls, reference)
        total = replay.snapshot()["total"]
        record(
            f"token2wav_arms[{declaration}-P{voice.frames}-{arm}]",
            calls=len(reference),
            exact=exact,
            hits=total["hits"],
            misses=total["misses"],
            captures=total["captures"],
            capture_s=total["capture_s"],
        )
        assert exact == len(reference), f"{arm}: {len(reference) - exact} calls differ"
        if arm.replay:
            assert total["hits"] > 0 and total["invalidations"] == 0, (arm, total)
        del stream, replay
        torch.cuda.empty_cache()

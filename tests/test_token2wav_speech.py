"""Tokens to PCM under every arm: the flow stream and the vocoder operator equal eager bit for bit.

Each arm's stream runs the whole call sequence from the same generator seed (the vocoder's source
filter draws randomness on every call, on the device where there is one — on this CPU that is the
host generator, which the effect probe rejects, so here the vocoder runs eagerly in every arm and
only the flow replays; the ``gpu`` variant replays both). Small flow and vocoder: the semantics
do not depend on the sizes.
"""

from __future__ import annotations

import pytest
import torch

from adapters.token2wav.checkpoint import load_token2wav
from adapters.token2wav.hift import HiFTConfig, build_hift
from adapters.token2wav.speech import SpeechStream
from engine.arms import ARMS, Arm
from engine.replay import ReplayEngine
from tests.gpu_results import record
from tests.token2wav_small import make_stream, random_voice, small_flow, token_calls

SMALL_HIFT = HiFTConfig(base_channels=64, f0_channels=64)
PATTERN: list[int | str] = [28, 28, 28, 28, "last:3", "reset", 28, 28, 13, "last:5"]


def run(arm: Arm, device: str, flow, hift, voice, calls) -> tuple[list[torch.Tensor], dict]:
    replay = ReplayEngine(device)
    flow_stream = make_stream(flow, voice, arm, replay, n_steps=2 if device == "cpu" else 10)
    stream = SpeechStream(flow_stream, hift, replay)
    torch.manual_seed(11)
    torch.cuda.manual_seed_all(11)
    pcm = []
    with torch.no_grad():
        for tokens, last in calls:
            if tokens is None:
                stream.reset()
            else:
                pcm.append(stream.push(tokens, last))
    return pcm, replay.snapshot()["ops"]


@pytest.fixture(scope="module")
def models():
    return small_flow(seed=3), build_hift(seed=4, config=SMALL_HIFT)


def test_every_arm_gives_the_same_pcm_on_cpu(models) -> None:
    flow, hift = models
    voice = random_voice(prompt_tokens=10, seed=5)
    calls = token_calls(PATTERN, seed=6)
    reference, _ = run(Arm.EAGER, "cpu", flow, hift, voice, calls)
    assert sum(p.shape[-1] for p in reference) > 0
    for arm in ARMS[1:]:
        pcm, ops = run(arm, "cpu", flow, hift, voice, calls)
        assert all(torch.equal(a, b) for a, b in zip(reference, pcm, strict=True)), arm
        if arm.replay:  # host randomness on the CPU: the vocoder is refused replay, counted
            assert ops["hift_chunk"]["rejections"] >= 1, ops["hift_chunk"]


@pytest.mark.gpu
def test_every_arm_gives_the_same_pcm_on_gpu() -> None:
    torch.backends.cudnn.deterministic = True
    flow, hift = load_token2wav(None, seed=3, device="cuda")
    voice = random_voice(prompt_tokens=151, seed=5, device="cuda")
    calls = token_calls([28] * 8 + ["last:3", "reset"] + [28] * 6 + ["last:3"], 6, "cuda")
    reference, _ = run(Arm.EAGER, "cuda", flow, hift, voice, calls)
    for arm in ARMS[1:]:
        pcm, ops = run(arm, "cuda", flow, hift, voice, calls)
        exact = sum(torch.equal(a, b) for a, b in zip(reference, pcm, strict=True))
        vocoder = ops["hift_chunk"]
        record(
            f"speech_pcm[{arm}]",
            calls=len(pcm),
            exact=exact,
            hift_hits=vocoder["hits"],
            hift_misses=vocoder["misses"],
            hift_rejections=vocoder["rejections"],
        )
        assert exact == len(pcm), f"{arm}: {len(pcm) - exact} chunks of PCM differ"
        if arm.replay:
            assert vocoder["hits"] > 0 and vocoder["rejections"] == 0, vocoder

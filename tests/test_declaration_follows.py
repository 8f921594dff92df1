"""Edit a declaration, change no code: the stream, its carry, its catalog and the warm-up follow.

A copy of MiniCPM-o's declaration in a temporary folder is edited to Lychee-FD's 13/10 windows
(10 new + 3 lookahead tokens, a 20-frame stride) and a retention of 150 frames instead of 100.
From that file alone the small CPU flow (``tests/token2wav_small.py``) gets a carry of
``P + 150 + 26`` frames keeping 150 prompt frames, a catalog over the new grid extents
``P, P + 20, …, P + 140, P + 150`` (K = 9), the stock path's trims at 150, and every arm stays
bit-exact against eager. Loaded through the family's face, the warm-up walks the new grid, so a
conversation's steady windows replay from the first period: not one is refused as ``sealed``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from adapters.face import ModelRequest
from adapters.token2wav.binding import bind_flow
from adapters.token2wav.family import Token2WavFamily
from engine.arms import ARMS, Arm
from engine.carry import RetentionRule
from engine.contract import Order
from engine.declaration_io import declarations_dir
from engine.replay import ReplayEngine
from tests.token2wav_small import (
    exact_calls,
    make_stream,
    random_voice,
    run_calls,
    small_flow,
    token_calls,
)

pytestmark = pytest.mark.usefixtures("one_thread")
RETAINED, STRIDE, LOOKAHEAD, CHUNK = 150, 10, 3, 20  # the edits
WINDOW = STRIDE + LOOKAHEAD  # 13 tokens, 26 frames


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniCPM-o's declaration with Lychee-FD's windows and 150 retained frames."""
    document = yaml.safe_load((declarations_dir() / "minicpmo45_token2wav.yaml").read_text())
    point = document["operating_point"]
    assert (point["f_retained"], point["stride_tokens"], point["f_chunk"]) == (100, 25, 50)
    point.update(f_retained=RETAINED, stride_tokens=STRIDE, f_chunk=CHUNK)
    path = tmp_path_factory.mktemp("declarations") / "edited_token2wav.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def flow():
    return small_flow(seed=1)


def test_the_binding_follows_the_file(edited: Path) -> None:
    P = 24
    binding = bind_flow(str(edited), P, n_steps=2)
    assert binding.max_call_tokens == WINDOW and binding.stride_tokens == STRIDE
    assert binding.carry == RetentionRule(4, RETAINED, P, Order.NEWEST_FIRST)
    assert binding.conformer == RetentionRule(3, P, RETAINED, Order.OLDEST_FIRST)
    assert binding.capacity == P + RETAINED + 2 * WINDOW
    assert binding.width == math.ceil(RETAINED / CHUNK) + 1 == 9
    grid = {P + CHUNK * k for k in range(RETAINED // CHUNK + 1)} | {P + RETAINED}
    assert {c.extent for c in binding.classes} == grid
    assert max(c.tokens for c in binding.classes) == WINDOW


def test_the_stream_follows_and_every_arm_stays_exact(flow, edited: Path) -> None:
    voice = random_voice(prompt_tokens=12, seed=2)
    P = voice.frames
    pattern: list[int | str] = [WINDOW] * 10 + [8, "last:4", "reset"] + [WINDOW] * 9 + ["last:7"]
    calls = token_calls(pattern, seed=3)
    off = ReplayEngine("cpu", enabled=False)
    eager = make_stream(flow, voice, Arm.EAGER, off, family=str(edited))
    reference = run_calls(eager, calls)
    att = reference[9][1]["estimator_att_cache"]
    assert att.shape[4] == P + RETAINED, "the stock trim keeps P + 150 once it binds"
    for arm in ARMS[1:]:
        replay = ReplayEngine("cpu")
        stream = make_stream(flow, voice, arm, replay, family=str(edited))
        assert stream.carry.capacity == P + RETAINED + 2 * WINDOW
        exact = exact_calls(stream, calls, reference)
        assert exact == len(reference), arm
        if arm.state_rule:
            assert stream.carry.extent == P + RETAINED and stream.carry.evictions > 0
        if arm.replay:
            total = replay.snapshot()["total"]
            assert total["hits"] > 0 and total["invalidations"] == 0, (arm, total)


def test_the_warm_up_follows_through_the_face(edited: Path) -> None:
    family = Token2WavFamily(key="edited", title="edited", declaration=str(edited))
    request = ModelRequest(voice_frames=24, arm=Arm.SRC, n_steps=2)
    loaded = family.load(request, lambda stage, fraction: None)
    replay = loaded.replay
    assert replay is not None and replay.sealed
    assert loaded.warmup["calls"] > 0 and loaded.warmup["captures"] > 0
    speech = loaded.model.synthesizer  # type: ignore[attr-defined]
    binding = speech.flow.binding
    assert binding.carry.prompt == RETAINED and binding.width == 9
    windower = loaded.model.windower  # type: ignore[attr-defined]
    assert (windower.stride, windower.window) == (STRIDE, WINDOW)
    g = torch.Generator().manual_seed(9)
    tokens = torch.randint(0, binding.vocab, (1, WINDOW + STRIDE * 12), generator=g)
    with torch.no_grad():
        for call in windower.push(tokens.to(torch.int32)):
            speech.push(call.tokens, call.last_chunk)
    ops = replay.snapshot()["ops"]
    flow_ops = {name: op for name, op in ops.items() if name.startswith("flow_chunk")}
    assert sum(op["hits"] for op in flow_ops.values()) >= 12
    sealed = {name: op["misses"] for name, op in flow_ops.items() if op["misses"]}
    assert not sealed, f"steady windows the warm-up missed: {sealed}"

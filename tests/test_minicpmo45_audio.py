"""MiniCPM-o 4.5's audio encoder under the backbone rules on the CPU: one unit, one signature.

The encoder is transformers' ``WhisperEncoder`` modules at a tiny config with seeded random
weights, its streaming forward and the model's ``get_audio_embedding_streaming`` the stand-in's
restatement of the public code (``tests/minicpmo45_audio_standin.py``; no vendor code in CI).
Units are the declaration's (the first unit's mel frames and context, then every later one's);
the position table is short, so the vendor's reset at its end comes every few units.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from adapters.minicpmo45.rules import BackboneRules, BackboneSpec
from engine.arms import Arm
from engine.replay import ReplayEngine
from tests.minicpmo45_audio_standin import StandInAudioModel, StandInWhisper
from tests.minicpmo45_standin import StandInBackboneDuplex, StandInDecoder, StandInTTS
from tests.test_minicpmo45_rules import Arms, build, equal, warm_up

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

MELS, TABLE = 16, 160


def session() -> tuple[Any, BackboneRules, Arms]:
    llm, tts = build()
    duplex = StandInBackboneDuplex(StandInDecoder(llm, 40, 30, preserve=5), StandInTTS(tts))
    model = StandInAudioModel(StandInWhisper(MELS, positions=TABLE))
    model.tts = duplex.model.tts  # type: ignore[attr-defined]
    duplex.model = model
    arm = Arms(Arm.EAGER)
    spec = replace(BackboneSpec.read(), extent_step=64)  # extents 64, 128, 192
    rules = BackboneRules(duplex, ReplayEngine("cpu", poison=True), arm, spec)
    return duplex, rules, arm


def hear(duplex: Any, seed: int, units: int, arms: list[Arm], arm: Arms) -> list[torch.Tensor]:
    """Each unit's embeddings over a conversation with a new one at its middle."""
    g = torch.Generator().manual_seed(seed)
    model, outs = duplex.model, []
    units_spec = BackboneSpec.read().audio_units
    for u in range(units):
        arm.arm = arms[u % len(arms)]
        if u in (0, units // 2):  # a new conversation: the vendor's reset_session
            model.reset_session()
        frames, prefix, suffix = units_spec[0 if u in (0, units // 2) else 1]
        # as the vendor's streaming processor hands it: a slice of its growing mel buffer
        mel = torch.randn(1, MELS, frames + 1 + u, generator=g)[..., -frames:]
        outs.append(model.get_audio_embedding_streaming(mel, prefix, suffix)[0][0].clone())
    return outs


def test_every_arm_equals_eager_across_resets_and_a_new_conversation() -> None:
    duplex, rules, arm = session()
    eager = hear(duplex, 0, 10, [Arm.EAGER], arm)
    assert equal(eager, hear(duplex, 0, 10, [Arm.EAGER], arm)), "eager reproduces itself"
    assert rules.audio_carry is not None and rules.audio_carry.capacity == 192  # 160 rounded
    assert rules.audio_carry.extents == (64, 128, 192)  # each reached: 3 units = 150 frames
    warm_up(rules)
    for arms in ([Arm.SRC], [Arm.SRC, Arm.EAGER, Arm.R, Arm.S]):
        rules.reset_stats()
        assert equal(eager, hear(duplex, 0, 10, arms, arm)), arms
    step = rules.stats()["replay"]["audio.step"]
    assert step["hits"] == 5 and not step["misses"], step  # SRc and R units of the mixed run
    assert not rules.stats()["fallbacks"], rules.stats()["fallbacks"]


def test_the_step_follows_the_vendors_forward_closely() -> None:
    """Ours against the stand-in's restated vendor forward on a growing cache: not bit for bit
    (masked attention over the carry's capacity), close in fp32, through three resets."""
    duplex, rules, arm = session()
    ours = hear(duplex, 1, 8, [Arm.EAGER], arm)
    rules.use_vendor(True)
    theirs = hear(duplex, 1, 8, [Arm.EAGER], arm)
    rules.use_vendor(False)
    assert len(ours) == len(theirs) == 8
    for x, y in zip(ours, theirs, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_a_unit_outside_the_catalog_runs_eagerly_counted() -> None:
    duplex, rules, arm = session()
    model = duplex.model
    mel = torch.randn(1, MELS, 100, generator=torch.Generator().manual_seed(2))
    model.reset_session()
    want = model.get_audio_embedding_streaming(mel, 0, 0)[0][0].clone()
    arm.arm = Arm.SRC
    warm_up(rules)
    rules.reset_stats()
    model.reset_session()
    assert torch.equal(want, model.get_audio_embedding_streaming(mel, 0, 0)[0][0])
    assert rules.stats()["replay"]["audio.step"]["misses"] == {"not_in_catalog": 1}

"""The catalog before traffic: the backbone's and Token2Wav's warm-up at a live switch (CPU).

A switch into a replay arm mid-conversation warms and captures every catalog entry
(:mod:`adapters.minicpmo45.warmup`), puts back everything it wrote and seals the engine: the
conversation then equals eager bit for bit, and no later call captures (no ``warmup`` miss, no
``sealed`` one). The backbone on the stand-in of ``tests/test_minicpmo45_rules.py`` (the rules
over transformers' Qwen3 and Llama at a tiny config); Token2Wav through the family's period model
(:class:`~adapters.minicpmo45.synthesis.DuplexSynthesis`) with the stand-in duplex object of
``tests/test_minicpmo45_loop.py``. On the CPU the replay engine simulates graphs, and an
operator that draws from the host generator (``llm.sample`` sampling, ``tts.token``,
``tts.tokens``) is rejected at its probe (``host_randomness``); on CUDA it is captured.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.minicpmo45.rules import BackboneRules
from adapters.minicpmo45.warmup import backbone_saved, backbone_steps
from engine.arms import Arm
from engine.warmup import warm_and_seal
from tests.test_minicpmo45_loop import SCRIPT, UNITS, _mic, _request, _speech
from tests.test_minicpmo45_rules import CODES, Arms, conversation, equal, session, speech_turns

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

RANDOM = {"host_randomness"}  # the CPU's generator is the host's (module docstring)


class Switching(Arms):
    """The session's arm; a switch into a replay arm warms the catalog first (once), as the
    family's period model does."""

    def __init__(self, arm: Arms) -> None:
        super().__init__(arm.arm)
        self.rules: BackboneRules | None = None
        self.warmups: list[dict[str, Any]] = []

    def __setattr__(self, name: str, value: Any) -> None:
        rules = getattr(self, "rules", None)
        if name == "arm" and rules is not None and value.replay and not rules.warmed:
            steps, restore = backbone_steps(rules), backbone_saved(rules)
            done = warm_and_seal(
                rules.replay, steps, report=lambda s, f: None, device="cpu", restore=restore
            )
            rules.warmed = True
            self.warmups.append(done | {"entries": len(steps)})
        super().__setattr__(name, value)


def switching(speech: bool = False, block: int = 0) -> tuple[Any, BackboneRules, Switching]:
    duplex, rules, arm = session(speech=speech, block=block)
    switch = Switching(arm)
    rules.arm = switch
    switch.rules = rules
    return duplex, rules, switch


def _state(rules: BackboneRules) -> list[Any]:
    """Everything a warm-up may touch: the carries whole, their lengths, the token loops'
    device state, the generator."""
    carries = [rules.llm_carry, rules.tts_carry, rules.audio_carry]
    out: list[Any] = [c.buffer.clone() for c in carries if c is not None]
    out += [torch.tensor([c.length for c in carries if c is not None])]
    if rules.sampler is not None:
        out += [rules.sampler.ring.clone(), rules.sampler.count.clone()]
    sp = rules.speech
    if sp is not None:
        out += [t.clone() for t in (sp.prev, sp.position, sp.slot, sp.ring, sp.taken)]
        out += [sp.temperature.clone(), sp.eos.clone()]
    return [*out, torch.get_rng_state()]


def _traffic(rules: BackboneRules, allowed: dict[str, set[str]]) -> dict[str, Any]:
    """The replay counters since the warm-up: no capture, no miss but ``allowed``'s."""
    replay = rules.stats()["replay"]
    for name, counters in replay.items():
        assert counters["captures"] == 0, (name, counters)
        assert set(counters["misses"]) <= allowed.get(name, set()), (name, counters)
    assert rules.replay.sealed
    return replay


@pytest.mark.parametrize("speech", [False, True], ids=["llm", "tts_head"])
def test_a_warm_up_puts_back_everything_it_wrote(speech: bool) -> None:
    _, rules, _ = switching(speech=speech, block=7 if speech else 0)
    g = torch.Generator().manual_seed(9)
    for carry in (rules.llm_carry, rules.tts_carry):  # a conversation's worth of live slots
        assert carry is not None
        carry.buffer.copy_(torch.randn(carry.buffer.shape, generator=g))
        carry.length = carry.capacity // 2 + 3
    if rules.sampler is not None:
        rules.sampler.ring.copy_(torch.randint(0, 90, rules.sampler.ring.shape, generator=g))
        rules.sampler.count.fill_(17)
        rules.sampler.mirrored = (1234, 17)
    if rules.speech is not None:
        sp = rules.speech
        sp.ring.copy_(torch.randint(0, CODES, sp.ring.shape, generator=g))
        sp.prev.fill_(3)
        sp.place(40, 41)
    torch.manual_seed(11)
    before = _state(rules)
    mirrored = rules.sampler.mirrored if rules.sampler is not None else None
    steps = backbone_steps(rules)
    restore = backbone_saved(rules)
    for step in steps:
        step()
    assert not equal(before, _state(rules)), "the warm-up wrote the carries and the generator"
    restore()
    assert equal(before, _state(rules))
    assert (rules.sampler.mirrored if rules.sampler is not None else None) == mirrored
    for name, op in rules.ops.items():  # every entry captured but the host generator's
        missing = op.uncaptured()
        if name == "llm.sample":
            assert len(missing) == 1, missing  # sampling; greedy draws nothing: captured
        elif name not in ("tts.token", "tts.tokens"):  # each draws: all rejected here
            assert missing == [], (name, missing)


def test_a_live_switch_mid_conversation_replays_every_later_call_and_equals_eager() -> None:
    duplex, rules, switch = switching()
    eager = conversation(duplex, 4, 6, [Arm.EAGER], switch, sample="greedy")
    # units 0-1 eager, then SRc from unit 2 (mid-conversation: live carry), a new
    # conversation at unit 3, eager again at unit 4 and SRc at 5 (warmed once)
    arms = [Arm.EAGER, Arm.EAGER, Arm.SRC, Arm.SRC, Arm.EAGER, Arm.SRC]
    assert equal(eager, conversation(duplex, 4, 6, arms, switch, sample="greedy"))
    assert len(switch.warmups) == 1 and switch.warmups[0]["captures"] > 0, switch.warmups
    # the stand-in's chunk takes its first token's input as a strided view of the condition's
    # output (the vendor's is a fresh embedding): outside the catalog, counted (test_rules)
    replay = _traffic(rules, {"tts.step": {"not_in_catalog"}})
    for name in ("llm.step", "llm.feed", "llm.sample", "tts.step"):
        assert replay[name]["hits"] > 0, (name, replay[name])
    assert rules.stats()["sampled"]["tokens"] > 0


def test_a_live_switch_mid_turn_replays_the_tts_heads_tokens_and_equals_eager() -> None:
    duplex, rules, switch = switching(speech=True, block=7)
    eager = speech_turns(duplex, 6, 9, [Arm.EAGER], switch, least=8)
    arms = [Arm.EAGER, Arm.SRC, Arm.SRC, Arm.R, Arm.SRC, Arm.S, Arm.SRC, Arm.SRC, Arm.SRC]
    assert equal(eager, speech_turns(duplex, 6, 9, arms, switch, least=8))  # unit 1: mid-turn
    assert len(switch.warmups) == 1, switch.warmups
    replay = _traffic(rules, {"tts.token": RANDOM, "tts.tokens": RANDOM})
    assert replay["tts.step"]["hits"] > 0
    assert rules.stats()["sampled"]["speech_blocks"] > 0


def test_the_period_models_switch_warms_token2wav_mid_turn_and_equals_eager() -> None:
    """The family's period model: a switch to SRc in the middle of a turn (unit 4 of the
    script's first turn) captures Token2Wav's catalog for SRc with its state put back; the PCM
    equals eager's and the decoder's later calls only replay."""
    from adapters.minicpmo45.family import period_model
    from tests.minicpmo45_standin import StandInDuplex

    def run(switch_at: int) -> tuple[list[Any], Any]:
        torch.manual_seed(0)
        speech = _speech(Arm.EAGER)
        model = period_model(speech, StandInDuplex(SCRIPT, seed=5), _request(Arm.EAGER))
        steps = []
        for k in range(UNITS):
            if k == switch_at:
                model.set_arm(Arm.SRC)
                speech.replay.reset_counters()  # traffic from here on
            steps.append(model.step(_mic(k)))
        return steps, model

    eager, _ = run(-1)
    switched, model = run(4)
    pcm = [torch.cat(list(s.audio), 1) for s in eager if s.audio]
    assert equal(pcm, [torch.cat(list(s.audio), 1) for s in switched if s.audio])
    assert [s.facts.get("warmup") is not None for s in switched].count(True) == 1
    (warmup,) = model.warmups
    assert warmup["at"] == "switch" and warmup["calls"]["token2wav_calls"] > 0, warmup
    assert warmup["captures"] > 0 and model.speech.replay.sealed
    totals = model.speech.replay.snapshot()["total"]
    assert totals["hits"] > 0 and totals["captures"] == 0, totals
    # Token2Wav's own fail-closed calls stay eager, counted: a natural end's last call (its size
    # follows the answer) is outside its catalog or warm-up (adapters/token2wav/warmup.py), and
    # on the CPU the vocoder's source draws from the host generator; no warm-up, no capture
    assert set(totals["misses"]) <= {"sealed", "not_in_catalog", "host_randomness"}, totals
    assert totals["misses"].get("warmup", 0) == 0 and totals["hits"] >= 4, (
        model.speech.replay.snapshot()["ops"]
    )


def test_after_a_switch_every_call_of_whole_units_replays() -> None:
    """Turns of whole units (25 tokens: the vendor's unit, the bench's every speaking unit):
    after a switch mid-turn every later flow call replays, across a turn's end and the next
    turn's flush (the vendor's call rule is in the switch's warm-up)."""
    from adapters.minicpmo45.family import period_model
    from tests.minicpmo45_standin import LISTEN, StandInDuplex, speak

    script = [LISTEN, *[speak(25, "a")] * 6, speak(25, "b", end=True), *[speak(25, "c")] * 3]
    speech = _speech(Arm.EAGER)
    model = period_model(speech, StandInDuplex(script, seed=5), _request(Arm.EAGER))
    for k in range(len(script)):
        if k == 3:
            model.set_arm(Arm.SRC)
        model.step(_mic(k))
    flow = speech.replay.snapshot()["ops"]["flow_chunk[carry]"]
    assert flow["hits"] == len(script) - 3 + 1 and not flow["misses"], flow  # + the last call

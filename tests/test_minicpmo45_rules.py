"""MiniCPM-o 4.5's backbone rules on the CPU: our step over the carry, its replay, the upkeep.

The LLM is a transformers ``Qwen3ForCausalLM`` and the TTS head a ``LlamaModel`` at a tiny
config with seeded random weights (the modules the checkpoint's code builds, from the
transformers installed here); the vendor's ``StreamDecoder`` around them is the stand-in in
``tests/minicpmo45_standin.py`` (no vendor code in CI). A scripted conversation feeds what the
duplex object feeds (prompt tokens, per unit ``<unit>``, ten audio embeddings with logits,
decode steps on the argmax, ``</unit>``), lets the vendor's window drop units past its high
mark, barges in (a new turn: nothing changes in the LLM) and starts a new conversation.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from adapters.minicpmo45.rules import BackboneRules, BackboneSpec
from adapters.minicpmo45.warmup import backbone_saved, backbone_steps
from engine.arms import Arm
from engine.replay import ReplayEngine
from tests.minicpmo45_standin import (
    StandInBackboneDuplex,
    StandInDecoder,
    StandInSpeechHead,
    StandInTTS,
)

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

HIDDEN, VOCAB, CODES = 64, 96, 40
EXTENT_STEP = 32


def build(seed: int = 0) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    qwen = transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
    )  # fmt: skip
    llama = transformers.LlamaConfig(
        vocab_size=8, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=100,
    )  # fmt: skip
    return transformers.Qwen3ForCausalLM(qwen).eval(), transformers.LlamaModel(llama).eval()


class Arms:
    def __init__(self, arm: Arm) -> None:
        self.arm = arm

    def __call__(self) -> Arm:
        return self.arm


def session(
    high: int = 40,
    low: int = 30,
    speech: bool = False,
    block: int = 0,
    kernels: str = "vendor",
    decode: str = "sdpa",
) -> tuple[StandInBackboneDuplex, BackboneRules, Arms]:
    llm, tts = build()
    decoder = StandInDecoder(llm, high, low, preserve=5)
    head = StandInSpeechHead(tts, codes=CODES) if speech else StandInTTS(tts)
    duplex = StandInBackboneDuplex(decoder, head, budget=6)
    arm = Arms(Arm.EAGER)
    spec = replace(BackboneSpec.read(), extent_step=EXTENT_STEP)  # a ladder at these sizes
    kernels_by_device = {"cpu": kernels, "cuda": kernels}
    spec = replace(
        spec,
        tts_block_tokens=block or spec.tts_block_tokens,
        kernels=kernels_by_device,
        decode={"cpu": decode, "cuda": decode},
    )
    rules = BackboneRules(duplex, ReplayEngine("cpu", poison=True), arm, spec)
    return duplex, rules, arm


def conversation(
    duplex: Any,
    seed: int,
    units: int,
    arms: list[Arm],
    arm: Arms,
    slide: bool = True,
    sample: str | None = None,
) -> list[Any]:
    """Every output of every feed and TTS call, with ``sample`` every id the decoder's
    ``decode`` picked and the generator after each unit; the arm switches live per unit."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    dec, outs = duplex.decoder, []
    embed = dec.m.model.embed_tokens
    dec.reset()
    for _ in range(5):  # the system prompt, one token a feed
        dec.feed(embed(torch.randint(0, VOCAB, (1,), generator=g)))
    for u in range(units):
        arm.arm = arms[u % len(arms)]
        if u == units // 2:  # a new conversation
            dec.reset()
            dec.feed(embed(torch.randint(0, VOCAB, (1,), generator=g)))
        dec.feed(embed(torch.tensor([1])))  # <unit>
        audio = torch.randn(10, HIDDEN, generator=g)
        logits, hidden = dec.feed(audio, return_logits=True)
        outs += [logits, hidden]
        for _ in range(4 if sample is None else 6):  # decode steps: the argmax, or decode's
            if sample is None:
                logits, hidden = dec.feed(embed(logits.argmax(-1)), return_logits=True)
            else:
                token = dec.decode(logits, mode=sample)
                outs.append(token.cpu())
                if int(token.item()) == dec.chunk_eos_id:
                    break
                logits, hidden = dec.feed(dec.embed_token(int(token.item())), return_logits=True)
            outs += [logits, hidden]
        outs.append(torch.get_rng_state())
        dec.feed(embed(torch.tensor([2])))  # </unit>
        while slide and dec.get_cache_length() > dec._window_config.basic_window_high_tokens:
            dec._drop_tokens_from_cache(7)  # the vendor's window: drop the oldest unit
        condition = torch.randn(1, 3 + u % 2, 48, generator=g)
        outs += duplex.model.tts.generate_chunk(condition, steps=5, start=2 * u)
    return outs


def warm_up(rules: BackboneRules) -> None:
    """Warm and capture every catalog entry now (under a replaying arm), then put back what the
    warm-up wrote: the steps the family's load and live switch run through
    :func:`engine.warmup.warm_and_seal` (:mod:`adapters.minicpmo45.warmup`)."""
    if not rules.arm().replay:
        return
    restore = backbone_saved(rules)
    for step in backbone_steps(rules):
        step()
    restore()
    rules.warmed = True


def equal(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(
    ("kernels", "decode"), [("vendor", "sdpa"), ("fused", "sdpa"), ("fused", "flex")]
)
def test_every_arm_equals_eager_across_slides_and_a_new_conversation(
    kernels: str, decode: str
) -> None:
    """With either kernel choice (``fused``: joined weights and the pieces compiled by
    inductor's C++ backend here, Triton's on a GPU) and either decode attention (``flex``: one
    token's attention by flex attention over the whole carry) every arm equals that choice's
    eager arm."""
    duplex, rules, arm = session(kernels=kernels, decode=decode)
    eager = conversation(duplex, 0, 6, [Arm.EAGER], arm)
    assert equal(eager, conversation(duplex, 0, 6, [Arm.EAGER], arm)), "eager reproduces itself"
    assert rules.window["slides"] >= 4, "the window slid in each half of each conversation"
    assert rules.llm_carry.extents == (32, 64)  # the window's high mark (40) crosses the first
    warm_up(rules)
    for arms in ([Arm.SRC], [Arm.SRC, Arm.EAGER, Arm.R, Arm.S]):
        assert equal(eager, conversation(duplex, 0, 6, arms, arm)), arms
    replay = rules.stats()["replay"]
    assert replay["llm.step"]["hits"] > 0 and replay["llm.feed"]["hits"] > 0
    assert replay["tts.step"]["hits"] > 0
    # The conditions' lengths are listed; what misses is each chunk's first token step, whose
    # input the stand-in takes as a strided view of the condition's output (the vendor's is a
    # fresh embedding): one a chunk under a replaying arm (6 + 3 units).
    assert replay["tts.step"]["misses"]["not_in_catalog"] == 6 + 3, replay["tts.step"]
    assert rules.stats()["fallbacks"]["window_upkeep_eager"] == rules.window["slides"]


def test_the_tts_conditions_every_length_is_in_the_catalog() -> None:
    """The TTS condition (the unit's text hidden states and audio_bos) is 1 to the decode
    budget's tokens: each length a catalog entry, captured at warm-up and replayed, equal to
    eager; a longer one runs eagerly, counted (fail-closed), and still equals eager."""
    duplex, rules, arm = session()
    budget = duplex.max_new_speak_tokens_per_chunk
    assert rules.tts_lengths == tuple(range(1, budget + 1))
    g = torch.Generator().manual_seed(3)
    conditions = [torch.randn(1, n, 48, generator=g) for n in (*range(1, budget + 2), 2, budget)]
    tts = duplex.model.tts
    eager = [h for c in conditions for h in tts.generate_chunk(c, steps=1, start=5)]
    arm.arm = Arm.SRC
    warm_up(rules)
    rules.reset_stats()
    assert equal(eager, [h for c in conditions for h in tts.generate_chunk(c, steps=1, start=5)])
    step = rules.stats()["replay"]["tts.step"]
    assert step["misses"] == {"not_in_catalog": 1}, step  # budget + 1 tokens, once
    assert step["hits"] == len(conditions) - 1, step


def test_the_decode_budget_is_what_streaming_generate_uses() -> None:
    """The family calls ``streaming_generate()`` without a budget: its parameter's default
    counts when it is larger than the duplex object's attribute."""
    from adapters.minicpmo45.rules import decode_budget

    class Duplex:
        max_new_speak_tokens_per_chunk = 6

        def streaming_generate(self, max_new_speak_tokens_per_chunk: int = 9) -> None:
            return None

    assert decode_budget(Duplex(), "max_new_speak_tokens_per_chunk") == 9
    Duplex.max_new_speak_tokens_per_chunk = 12
    assert decode_budget(Duplex(), "max_new_speak_tokens_per_chunk") == 12


@pytest.mark.parametrize("mode", ["sampling", "greedy"])
def test_every_arm_equals_eager_with_the_decoders_sampling(mode: str) -> None:
    """The replaying arms pick each token with ``llm.sample`` (the vendor's ``decode`` on the
    device), eager and S with the vendor's own: the same ids, logits and generator state on every
    token, across slides, the chunk-eos branch taken or not, and a new conversation."""
    duplex, rules, arm = session()
    with torch.no_grad():  # chunk-eos likelier than the tiny model's 1/96, to end units early
        duplex.decoder.m.lm_head.weight[duplex.decoder.chunk_eos_id] *= 20
    eager = conversation(duplex, 4, 6, [Arm.EAGER], arm, sample=mode)
    assert equal(eager, conversation(duplex, 4, 6, [Arm.EAGER], arm, sample=mode))
    ids = [int(t) for t in eager if t.dtype == torch.int64 and t.numel() == 1]
    eos = ids.count(duplex.decoder.chunk_eos_id)
    assert len(ids) > eos >= (1 if mode == "sampling" else 0), ids
    arm.arm = Arm.SRC
    warm_up(rules)  # captures llm.sample in both modes: no trace in the generator or the ring
    rules.reset_stats()
    for arms in ([Arm.SRC], [Arm.SRC, Arm.EAGER, Arm.R, Arm.S]):
        assert equal(eager, conversation(duplex, 4, 6, arms, arm, sample=mode)), arms
    stats = rules.stats()
    assert stats["sampled"]["tokens"] == stats["sampled"]["host_reads"] > 0
    assert stats["sampled"]["ring_rebuilt"] >= 2  # each conversation's new list
    # every decode step but a unit's stop ran ahead of its read, and was taken
    assert stats["sampled"]["ahead_used"] > 0, stats["sampled"]
    assert mode == "greedy" or stats["sampled"]["ahead_dropped"] > 0, stats["sampled"]
    assert rules.window["slides"] > 0
    sample = stats["replay"]["llm.sample"]
    if mode == "greedy":
        assert sample["hits"] == stats["sampled"]["tokens"], sample
    else:  # the CPU's generator is the host's: the engine runs the draws eagerly, counted
        assert set(sample["misses"]) == {"host_randomness"}, sample
        assert stats["sampled"]["rewinds"] > 0


def speech_turns(
    duplex: Any, seed: int, units: int, arms: list[Arm], arm: Arms, least: int = 6
) -> list[Any]:
    """The duplex object's calls of the TTS head's ``generate_chunk`` (its streaming_generate's
    arguments and turn bookkeeping: a turn ends every third unit); every token and the
    generator after each unit."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    tts, outs, past, start = duplex.model.tts, [], None, 0
    for u in range(units):
        arm.arm = arms[u % len(arms)]
        condition = torch.randn(1, 3 + u % 2, 48, generator=g)
        at_least = 0 if u % 3 == 0 else least
        tokens, kv = tts.generate_chunk(
            inputs_embeds=condition, temperature=torch.tensor([0.8]), repetition_penalty=1.05,
            eos_token=torch.tensor([CODES - 1]), force_no_stop=False, max_new_token=8,
            min_new_tokens=at_least, past_key_values=past, logits_processors=None,
            text_start_pos=start,
        )  # fmt: skip
        outs += [tokens.clone(), torch.get_rng_state()]
        past, start = (None, 0) if u % 3 == 2 else (kv, start + 3 + u % 2 + tokens.shape[1])
    return outs


def test_every_arm_equals_eager_with_the_tts_heads_token_loop() -> None:
    """Under a replaying arm the TTS head's tokens come from ``tts.token`` (one call and one
    host read a token); eager and S run the vendor's ``generate_chunk``: the same tokens and
    generator, eos taken early and not, across turns."""
    duplex, rules, arm = session(speech=True)
    with torch.no_grad():  # the eos code likelier, so some chunks end early
        duplex.model.tts.head_code[0].parametrizations.weight.original0[CODES - 1] *= 4
    eager = speech_turns(duplex, 5, 9, [Arm.EAGER], arm)
    assert equal(eager, speech_turns(duplex, 5, 9, [Arm.EAGER], arm))
    lengths = [int(t.shape[1]) for t in eager[::2]]
    assert min(lengths) < 7 and max(lengths) == 7, lengths
    arm.arm = Arm.SRC
    warm_up(rules)
    rules.reset_stats()
    for arms in ([Arm.SRC], [Arm.SRC, Arm.EAGER, Arm.R, Arm.S]):
        assert equal(eager, speech_turns(duplex, 5, 9, arms, arm)), arms
    stats = rules.stats()
    token = stats["replay"]["tts.token"]
    assert set(token["misses"]) == {"host_randomness"}, token  # the CPU's host generator
    assert stats["sampled"]["speech_host_reads"] > 0
    assert not {k for k in stats["fallbacks"] if k.startswith("tts_token")}, stats["fallbacks"]


def test_a_chunk_that_cannot_stop_is_one_replay() -> None:
    """A chunk whose eos is masked to its end (the vendor's mid-turn chunk: at least as many
    tokens as it asks) makes every token after the condition's in one ``tts.tokens`` call with
    no host read; the others one a token. Equal to the vendor's loop under eager, across turns
    and the extent ladder (32 slots: chunks cross it, and those run one a token)."""
    duplex, rules, arm = session(speech=True, block=7)  # the stand-in's chunk: 8 tokens asked
    eager = speech_turns(duplex, 6, 9, [Arm.EAGER], arm, least=8)
    arm.arm = Arm.SRC
    warm_up(rules)
    rules.reset_stats()
    for arms in ([Arm.SRC], [Arm.SRC, Arm.EAGER, Arm.R, Arm.S]):
        assert equal(eager, speech_turns(duplex, 6, 9, arms, arm, least=8)), arms
    stats = rules.stats()
    blocks = stats["replay"]["tts.tokens"]
    assert stats["sampled"]["speech_blocks"] >= 3, stats["sampled"]
    assert set(blocks["misses"]) == {"host_randomness"}, blocks  # the CPU's host generator
    assert stats["replay"]["tts.token"]["misses"], "turn starts and crossings: one a token"


@pytest.mark.parametrize("kernels", ["vendor", "fused"])
def test_the_vendor_loop_on_the_same_weights_agrees_closely(kernels: str) -> None:
    """Ours against the stand-in's transformers forward on a growing cache: not bit for bit
    (other attention kernels and extents; with ``fused`` the joined GEMMs and inductor's
    arithmetic too), close in fp32, the same argmax here."""
    duplex, rules, arm = session(kernels=kernels)
    ours = conversation(duplex, 1, 6, [Arm.EAGER], arm)
    rules.use_vendor(True)
    theirs = conversation(duplex, 1, 6, [Arm.EAGER], arm)
    rules.use_vendor(False)
    assert len(ours) == len(theirs)
    for x, y in zip(ours, theirs, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_a_full_carry_runs_the_vendors_code_counted() -> None:
    duplex, rules, arm = session()
    warm_up(rules)
    outs = conversation(duplex, 2, 12, [Arm.SRC], arm, slide=False)
    assert rules.llm_carry.capacity < 6 * 16
    assert rules.stats()["fallbacks"].get("llm_carry_full", 0) == 2  # once a conversation
    assert duplex.decoder.get_cache_length() > rules.llm_carry.capacity
    arm.arm = Arm.EAGER
    assert equal(outs, conversation(duplex, 2, 12, [Arm.EAGER], arm, slide=False))


def test_the_extent_is_the_least_of_the_ladder_that_holds_the_call() -> None:
    from adapters.minicpmo45.kv import KVCarry

    carry = KVCarry(1, 1, 1100, 2, dtype=torch.float32, device="cpu")
    assert carry.extents == (1100,) and carry.extent(5) == 1100
    carry.ladder(512)
    assert carry.extents == (512, 1024, 1100)
    assert [carry.extent(n) for n in (1, 512, 513)] == [512, 512, 1024]
    carry.length = 1020
    assert (carry.extent(4), carry.extent(5), carry.extent(200)) == (1024, 1100, 1100)


def test_a_look_ahead_step_for_another_id_than_the_one_fed_changes_nothing() -> None:
    """The vendor replaces a sampled ``<|listen|>`` by ``tts_bos`` while a turn goes on: the
    step launched ahead for the sampled id is dropped (its slot is dead) and the feed of the
    other id runs as before; the outputs equal eager's."""

    def run() -> list[Any]:
        torch.manual_seed(3)
        dec, outs = duplex.decoder, []
        embed = dec.m.model.embed_tokens
        dec.reset()
        logits, _ = dec.feed(embed(torch.tensor([5, 6, 7])), return_logits=True)
        for k in range(6):
            tid = int(dec.decode(logits, mode="greedy").item())
            other = (tid + 1) % VOCAB if k % 2 else tid  # every other step: another id
            logits, hidden = dec.feed(dec.embed_token(other), return_logits=True)
            outs += [logits, hidden]
        return outs

    duplex, rules, arm = session()
    eager = run()
    arm.arm = Arm.SRC
    warm_up(rules)
    rules.reset_stats()
    assert equal(eager, run())
    assert rules.sampled["ahead_used"] == 3 and rules.sampled["ahead_dropped"] == 3, rules.sampled


def test_the_fused_decode_step_launches_fewer_kernels() -> None:
    """One LLM decode step (1 token), counted by :func:`~adapters.minicpmo45.kernel_count.
    count_call` (ATen ops dispatched plus the compiled pieces' kernels): ``fused`` launches
    fewer than ``vendor``, and its weights take no more memory (the modules' are views)."""
    from adapters.minicpmo45.kernel_count import count_call

    counts = {}
    for kernels in ("vendor", "fused"):
        duplex, rules, _ = session(kernels=kernels)
        params = sum(
            p.untyped_storage().nbytes()
            for p in {
                p.untyped_storage().data_ptr(): p for p in duplex.decoder.m.parameters()
            }.values()
        )
        step, carry = rules.llm_step, rules.llm_carry
        x = torch.randn(1, 1, HIDDEN)
        pos = torch.tensor([[3]])
        with torch.no_grad():
            step.logits(x, pos, pos[0], carry.buffer, 32)  # compiled here (fused)
        call = functools.partial(step.logits, x, pos, pos[0], carry.buffer, 32)
        counts[kernels] = count_call(call)
        counts[kernels]["weight_bytes"] = params
    vendor, fused = counts["vendor"], counts["fused"]
    assert fused["weight_bytes"] == vendor["weight_bytes"], counts
    assert fused["kernels"] < 0.65 * vendor["kernels"], (fused["kernels"], vendor["kernels"])
    assert fused["ops"].get("pow", 0) == 1 and vendor["ops"]["pow"] == 9  # the first norm only


@pytest.mark.parametrize(
    ("device", "backend"),
    [("cpu", "math"), pytest.param("cuda", "efficient", marks=pytest.mark.gpu)],
)
def test_the_steps_additive_mask_is_what_sdpa_makes_of_the_boolean_one(
    device: str, backend: str
) -> None:
    """:func:`~adapters.minicpmo45.llm_step.attention_bias`, made once a step, gives the pinned
    attention kernel the same values as the boolean mask it replaces: equal outputs, bit for
    bit (decode and prefill rows, grouped query heads, an extent past the live slots)."""
    from adapters.minicpmo45.llm_step import attention_bias, sdpa_backend

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    g = torch.Generator().manual_seed(5)
    group, extent = 4, 128
    cols = torch.arange(extent, device=device)
    for slots in ([37], [90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100]):
        rows = len(slots)
        at = torch.tensor(slots, device=device)
        q, k, v = (
            torch.randn(shape, generator=g).to(device, torch.bfloat16)
            for shape in ((1, 2, group * rows, 64), (1, 2, extent, 64), (1, 2, extent, 64))
        )
        keep = (cols.unsqueeze(0) <= at.unsqueeze(1)).repeat(group, 1).view(1, 1, -1, extent)
        with sdpa_backend(backend):
            boolean = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            bias = attention_bias(cols, at, group, torch.bfloat16)
            additive = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        assert torch.equal(boolean, additive), slots


def test_flex_decode_attends_the_live_slots_as_sdpa_does() -> None:
    """:func:`~adapters.minicpmo45.fused_step.attend_one` (flex attention over the whole carry,
    the blocks above the live slots never read, compiled as the step runs it) against SDPA over
    exactly the live slots: equal to float32's rounding for a slot in the first block, on a
    block's edge and in the last one, whatever the carry holds above the live slots."""
    from adapters.minicpmo45.fused_step import compiled

    attend_one = compiled()["attend_one"]

    g = torch.Generator().manual_seed(9)
    kv_heads, group, capacity, dim, block = 2, 3, 256, 32, 64
    kv = torch.randn(2, kv_heads, capacity, dim, generator=g)
    for slot in (0, 63, 64, 130, 255):
        grouped = torch.randn(1, kv_heads, group, dim, generator=g)
        stale = kv.clone()
        stale[:, :, slot + 1 :] = 1e4  # stale slots: masked, whatever they hold
        out = attend_one(grouped, stale, torch.tensor([slot]), block)
        keys, values = kv[0:1, :, : slot + 1], kv[1:2, :, : slot + 1]
        ref = F.scaled_dot_product_attention(grouped, keys, values)
        assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), slot


def test_every_arm_equals_eager_attending_each_carrys_whole_capacity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``DUPLEXCADENCE_MO45_EXTENT_STEP=0`` (a run's choice over the declaration's ladder): each
    carry attends its whole capacity, one signature per fed length, and every arm still equals
    eager, across the window's slides and a new conversation."""
    from adapters.minicpmo45.rules import EXTENT_ENV

    monkeypatch.setenv(EXTENT_ENV, "0")
    duplex, rules, arm = session()
    assert rules.extent_step == 0 and rules.stats()["extent_step"] == 0
    assert rules.llm_carry.extents == (rules.llm_carry.capacity,)
    assert rules.tts_carry is not None and len(rules.tts_carry.extents) == 1
    eager = conversation(duplex, 0, 6, [Arm.EAGER], arm)
    assert equal(eager, conversation(duplex, 0, 6, [Arm.EAGER], arm)), "eager reproduces itself"
    assert rules.window["slides"] >= 4
    warm_up(rules)
    for arms in ([Arm.SRC], [Arm.SRC, Arm.EAGER, Arm.R, Arm.S]):
        assert equal(eager, conversation(duplex, 0, 6, arms, arm)), arms
    assert rules.stats()["replay"]["llm.feed"]["hits"] > 0
    monkeypatch.setenv(EXTENT_ENV, "many")
    with pytest.raises(ValueError, match="whole number of slots"):
        session()

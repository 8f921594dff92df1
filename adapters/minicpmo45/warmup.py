"""The backbone's catalog before traffic: every entry warmed and captured, the conversation kept.

:func:`backbone_steps` lists one warm-up step per catalog entry of the backbone rules
(:class:`~adapters.minicpmo45.rules.BackboneRules`): ``llm.step`` and ``llm.feed`` at every fed
length and every extent of the carry's ladder, ``llm.sample`` in both modes, ``tts.step`` at
every condition length and extent, ``tts.token`` (eos masked and not) and ``tts.tokens`` at every
extent, ``audio.step`` for each declared unit at every extent. Each step calls its entry the
replay engine's ``warmup_calls`` times and once more (the warm-ups, then the capture), with
seeded random inputs (never zeros), on the conversation's own carries and device state, so the
graphs alias what traffic uses. :func:`speech_steps` is Token2Wav's share (the
``synthetic`` family's turn shapes, :func:`adapters.token2wav.warmup.warmup_turn`) for a switch
into a replay arm whose decoder graphs the load did not capture.

What the steps write is taken back by :func:`backbone_saved` / :func:`speech_saved`, taken before
them: the first slots of each carry (every step writes from slot 0, never more than the longest
entry), the carries' lengths, the token loops' device state (the LLM's repetition ring, the TTS
head's previous token, position, slot, draw ring and temperature), Token2Wav's flow state (by
value, through its stock form, as an arm switch moves it) and vocoder tails, and the default
generators (host and device). So a warm-up at a live switch, mid-turn, leaves the conversation
bit for bit where it was (``tests/test_minicpmo45_warmup.py``). :func:`engine.warmup.warm_and_seal`
runs the steps with the load's progress reports, restores and seals.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from adapters.minicpmo45.sample import MODES

if TYPE_CHECKING:
    from adapters.minicpmo45.kv import KVCarry
    from adapters.minicpmo45.rules import BackboneRules
    from adapters.token2wav.family import SpeechModel
    from adapters.token2wav.speech import SpeechStream

__all__ = [
    "backbone_saved",
    "backbone_steps",
    "generators_saved",
    "speech_saved",
    "speech_steps",
]

Step = Callable[[], None]


def backbone_steps(rules: BackboneRules) -> list[Step]:
    """One step per catalog entry of ``rules`` (module docstring), in a fixed order."""
    reps = rules.replay.warmup_calls + 1
    device = rules.device
    steps: list[Step] = []

    def entry(context: Callable[[], AbstractContextManager[Any]], call: Step) -> Step:
        def run() -> None:
            with context():
                for _ in range(reps):
                    call()

        return run

    for n in rules.spec.llm_lengths:
        hidden = _hidden(rules.llm_step.core)
        for extent in rules.llm_carry.extents:
            for name in ("llm.step", "llm.feed"):
                call = _carry_call(rules, name, rules.llm_carry, hidden, n, extent)
                steps.append(entry(torch.no_grad, call))
    sampler = rules.sampler
    if sampler is not None:
        params = rules._sample_params(rules._decode_defaults)
        dtype = rules.llm_carry.buffer.dtype
        for mode in MODES:

            def sample(mode: str = mode) -> None:
                logits = torch.randn(1, sampler.vocab, device=device).to(dtype)
                rules.ops["llm.sample"](logits, sampler.ring, sampler.count, mode, *params)

            steps.append(entry(torch.no_grad, sample))
    if rules.speech is not None and rules.tts_carry is not None:
        steps += [entry(torch.inference_mode, call) for call in _speech_calls(rules)]
    audio, carry = rules.audio_step, rules.audio_carry
    if audio is not None and carry is not None:
        for frames, prefix, suffix in rules.audio_units:
            n = audio.frames(frames, prefix, suffix)
            for extent in carry.extents:

                def hear(frames: int = frames, prefix: int = prefix, suffix: int = suffix,
                         n: int = n, extent: int = extent) -> None:  # fmt: skip
                    mel = torch.randn(1, rules.audio_mels, frames, device=device)
                    slots = torch.arange(n, device=device)
                    rules.ops["audio.step"](mel, slots, carry.buffer, prefix, suffix, extent)

                steps.append(entry(torch.no_grad, hear))
    if rules.tts_step is not None and rules.tts_carry is not None:
        hidden = _hidden(rules.tts_step.core)
        for n in rules.tts_lengths:
            for extent in rules.tts_carry.extents:
                call = _carry_call(rules, "tts.step", rules.tts_carry, hidden, n, extent)
                steps.append(entry(torch.inference_mode, call))  # as generate_chunk calls it
    return steps


def _hidden(core: Any) -> int:
    return int(core.config.hidden_size)


def _carry_call(
    rules: BackboneRules, name: str, carry: KVCarry, hidden: int, n: int, extent: int
) -> Step:
    """One call of a carry step (``llm.step``, ``llm.feed``, ``tts.step``) writing slots 0..n-1."""

    def call() -> None:
        device = rules.device
        x = torch.randn(1, n, hidden, dtype=carry.buffer.dtype, device=device)
        positions = torch.arange(n, device=device).unsqueeze(0)
        rules.ops[name](x, positions, positions[0], carry.buffer, extent)

    return call


def _speech_calls(rules: BackboneRules) -> list[Step]:
    """``tts.token`` (eos masked and not) and ``tts.tokens`` at every extent, each from slot 0."""
    sp, carry = rules.speech, rules.tts_carry
    assert sp is not None and carry is not None
    penalty = rules._tts_penalty[0]
    device = rules.device
    calls: list[Step] = []

    def start() -> None:  # a chunk from slot 0, eos the last code, temperature 1
        sp.start(torch.tensor([sp.vocab - 1], device=device), torch.ones(1, 1, device=device))
        sp.place(0, 0)

    for mask in (False, True):
        for extent in carry.extents:

            def token(mask: bool = mask, extent: int = extent) -> None:
                start()
                draw = sp.draw(penalty, penalty != 1.0, mask)
                rules.ops["tts.token"](sp.prev, sp.position, sp.slot, sp.buffer, draw, extent)

            calls.append(token)
            if mask and "tts.tokens" in rules.ops:

                def tokens(extent: int = extent) -> None:
                    start()
                    draw = sp.draw(penalty, penalty != 1.0, True)
                    rules.ops["tts.tokens"](
                        sp.prev, sp.position, sp.slot, sp.buffer, draw, extent, rules._tts_block
                    )

                calls.append(tokens)
    return calls


def backbone_saved(rules: BackboneRules) -> Step:
    """What :func:`backbone_steps` writes, taken now; the returned step puts it back."""
    written = {
        id(rules.llm_carry): max(rules.spec.llm_lengths),
    }
    carries = [rules.llm_carry]
    if rules.tts_carry is not None:
        carries.append(rules.tts_carry)
        written[id(rules.tts_carry)] = max((*rules.tts_lengths, rules._tts_block, 1))
    if rules.audio_carry is not None and rules.audio_step is not None:
        carries.append(rules.audio_carry)
        written[id(rules.audio_carry)] = max(
            rules.audio_step.frames(*unit) for unit in rules.audio_units
        )
    heads = [
        (c, c.length, c.buffer[:, :, :, : written[id(c)]].clone()) for c in carries
    ]  # fmt: skip
    tensors: list[Tensor] = []
    if rules.sampler is not None:
        tensors += [rules.sampler.ring, rules.sampler.count]
        mirrored = rules.sampler.mirrored
    sp = rules.speech
    if sp is not None:
        tensors += [sp.prev, sp.position, sp.slot, sp.ring, sp.taken, sp.temperature, sp.eos]
    values = [t.clone() for t in tensors]
    generators = generators_saved(rules.device)

    def restore() -> None:
        for carry, length, head in heads:
            carry.buffer[:, :, :, : head.shape[3]].copy_(head)
            carry.length = length
        for t, v in zip(tensors, values, strict=True):
            t.copy_(v)
        if rules.sampler is not None:
            rules.sampler.mirrored = mirrored
        generators()

    return restore


def speech_steps(speech: SpeechModel, seed: int, device: str) -> list[Step]:
    """Token2Wav's warm-up calls pushed through ``speech``'s stream under its current arm, a
    reset after each last call: the ``synthetic`` family's two turn shapes, each twice, and the
    vendor's call rule (:class:`~adapters.minicpmo45.windows.DuplexWindower`) on turns of whole
    units (``period_tokens`` a unit, the turn's first unit flushing) to the extent's bound, ended
    by a unit with no tokens, twice."""
    from adapters.minicpmo45.windows import DuplexWindower
    from adapters.token2wav.warmup import warmup_turn

    stream = speech.speech
    calls = [
        (call.tokens, call.last_chunk)
        for steady in (speech.binding.width, 0)
        for call in warmup_turn(speech.windower, steady, seed, device, speech.vocab) * 2
    ]
    first = [True]
    windower = DuplexWindower.like(speech.windower, lambda: first[0])
    g = torch.Generator().manual_seed(seed)
    unit = int(speech.values["period_tokens"])
    for _ in range(2):
        for k in range(speech.binding.width + 3):
            first[0] = k == 0
            tokens = torch.randint(0, speech.vocab, (1, unit), generator=g, dtype=torch.int32)
            calls += [(c.tokens, c.last_chunk) for c in windower.push(tokens.to(device))]
        first[0] = False
        end = windower.push(torch.zeros(1, 0, dtype=torch.int32, device=device), turn_end=True)
        calls += [(c.tokens, c.last_chunk) for c in end]

    def push(tokens: Tensor, last: bool) -> Step:
        def run() -> None:
            with torch.no_grad():
                stream.push(tokens, last)
                if last:
                    stream.reset()

        return run

    return [push(tokens, last) for tokens, last in calls]


def speech_saved(stream: SpeechStream) -> Step:
    """Token2Wav's stream state (flow by value in its stock form, vocoder tails), taken now;
    the returned step puts it back under the stream's current arm."""
    from adapters.token2wav.vocoder_stream import VocoderState

    flow, arm = stream.flow, stream.arm
    # The state rule's stock form pads its estimator regions into fresh tensors (as large as
    # the stock envelope's slots: not cloned again); the rest may be views the pushes overwrite
    fresh = {"estimator_att_cache", "estimator_cnn_cache"} if arm.state_rule else set()
    state = {k: v if k in fresh else v.clone() for k, v in flow.stock_state().items()}
    tails = stream.state
    tails = VocoderState(tails.mel.clone(), tails.source.clone(), tails.speech.clone())

    def restore() -> None:
        if arm.state_rule:
            flow.rule.load(state)
        else:
            assert flow.stock is not None, "a stock arm runs on the stock state"
            flow.stock.load(state)
        stream.state = tails
        assert stream.arm is arm, "the warm-up changed the stream's arm"

    return restore


def generators_saved(device: torch.device) -> Step:
    """The default generators (host, and the device's), taken now; the step puts them back."""
    host = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def restore() -> None:
        torch.set_rng_state(host)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)

    return restore

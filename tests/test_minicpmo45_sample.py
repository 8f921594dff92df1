"""The LLM's sampling on the device (``adapters/minicpmo45/sample.py``) against the vendor's form.

The vendor's ``StreamDecoder.decode`` is restated in ``tests/minicpmo45_standin.py`` (host reads,
the repetition penalty's Python loop, boolean indexing; no vendor code in CI; the real one is
compared outside CI by ``tests/test_minicpmo45_rules_vendor.py``). :class:`DeviceDecode` must
return the same id on every token and leave the generator where the vendor's leaves it, greedy
and sampled, the chunk-eos branch taken or not, with a history long enough to wrap the ring.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.minicpmo45.sample import DeviceDecode, decode_defaults
from tests.minicpmo45_standin import StandInDecoder

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 600


class _Config:
    vocab_size = VOCAB


class _LLM:
    config = _Config()
    device = torch.device("cpu")


def _decoder() -> Any:
    return StandInDecoder(_LLM(), 40, 30, preserve=0)


def _logits(g: torch.Generator, t: int, vocab: int = VOCAB) -> torch.Tensor:
    """bf16 logits with a few peaks (repeats likely), chunk-eos and turn-eos sometimes on top."""
    x = torch.randn(1, vocab, generator=g) * 2
    x[0, torch.randint(0, 40, (6,), generator=g)] += 6
    if t % 7 == 3:
        x[0, vocab - 1] += 12  # chunk-eos: the first draw takes it
    x[0, vocab - 2] *= -1 if t % 2 else 1  # turn-eos's logit of both signs
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("mode", ["sampling", "greedy"])
@pytest.mark.parametrize("window", [512, 16])
def test_the_device_decode_equals_the_vendors(mode: str, window: int) -> None:
    vendor, ours = _decoder(), _decoder()
    sampler = DeviceDecode(ours, VOCAB, window, torch.device("cpu"))
    defaults = decode_defaults(vendor.decode)
    params = [defaults[n] for n in ("temperature", "top_k", "top_p", "listen_prob_scale")]
    params += [defaults["text_repetition_penalty"], defaults["length_penalty"]]
    g = torch.Generator().manual_seed(3)
    torch.manual_seed(11)
    eos = 0
    for t in range(160):
        logits = _logits(g, t)
        state = torch.get_rng_state()
        want = int(vendor.decode(logits, mode=mode, text_repetition_window_size=window).item())
        after = torch.get_rng_state()
        torch.set_rng_state(state)
        sampler.mirror()
        got = int(sampler.step(logits, sampler.ring, sampler.count, mode, *params).item())
        if got == sampler.eos and mode == "sampling":
            sampler.rewind(state, logits)
        sampler.took(got, got == sampler.eos)
        assert got == want, t
        assert torch.equal(torch.get_rng_state(), after), f"the generator after token {t}"
        eos += got == sampler.eos
    assert ours.generated_tokens == vendor.generated_tokens
    assert ours.generated_special_tokens == vendor.generated_special_tokens
    assert len(vendor.generated_tokens) > min(window, 100), "the ring wrapped (window 16)"
    if mode == "sampling":
        assert 10 <= eos <= 40, eos  # the chunk-eos branch taken and not


def test_the_ring_follows_the_decoders_list() -> None:
    """A reset (the vendor's new list) or tokens the vendor appended are mirrored once."""
    dec = _decoder()
    sampler = DeviceDecode(dec, VOCAB, 4, torch.device("cpu"))
    dec.generated_tokens.extend([5, 6, 7, 8, 9, 10])
    assert sampler.mirror() and not sampler.mirror()
    assert sampler.ring.tolist() == [7, 8, 9, 10] and int(sampler.count) == 4
    dec.reset()
    assert sampler.mirror() and sampler.ring.tolist() == [-1, -1, -1, -1]


def test_the_speech_heads_sampling_equals_the_vendors() -> None:
    """:meth:`SpeechTokens.sample` against the vendor's head, processor and draw (restated in the
    stand-in) on a few codes, so tokens repeat and the penalty's counts reach the window."""
    import transformers

    from adapters.minicpmo45.tts_sample import SpeechTokens, repetition_processor
    from tests.minicpmo45_standin import StandInSpeechHead, gen_logits

    torch.manual_seed(0)
    codes, hidden = 6, 32
    config = transformers.LlamaConfig(
        vocab_size=8, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    head = StandInSpeechHead(transformers.LlamaModel(config).eval(), codes)
    penalty, window = repetition_processor(head, 1.05) or (0.0, 0)
    assert (penalty, window) == (1.05, 16)
    speech = SpeechTokens(head, None, torch.zeros(1), window)  # type: ignore[arg-type]
    temperature = torch.tensor([[0.8]])
    speech.start(torch.tensor([codes - 1]), temperature)
    processor = gen_logits(codes, 1.05)[1][0]
    g = torch.Generator().manual_seed(1)
    history: list[int] = []
    with torch.inference_mode():
        for t in range(120):
            h = torch.randn(1, 1, hidden, generator=g) * 4
            mask = t % 5 == 0
            state = torch.get_rng_state()
            logits = head.head_code[0](h)[:, -1].float() / temperature
            if history:
                logits = processor(torch.tensor([history]), logits)
            if mask:
                logits[:, torch.tensor([codes - 1])] = -torch.inf
            want = int(torch.multinomial(torch.softmax(logits, -1), 1))
            after = torch.get_rng_state()
            torch.set_rng_state(state)
            got = speech.sample(h, speech.draw(1.05, bool(history), mask))
            assert int(got) == want, t
            assert torch.equal(torch.get_rng_state(), after)
            history.append(want)
    assert max(history.count(c) for c in range(codes)) > 16

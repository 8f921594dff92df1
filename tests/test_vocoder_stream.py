"""The HiFT streaming wrapper reproduces MiniCPM-o's 0.1.x ``Token2wav.stream`` vocoder half.

The 0.1.x module imports torchaudio, s3tokenizer, onnxruntime and hyperpyyaml and hard-codes CUDA,
so CI cannot import it. :func:`_reference_stream` restates its vocoder half (``minicpmo`` 0.1.2,
``stepaudio2/token2wav.py``) statement by statement with the vendor's dict state; that restatement
and our wrapper were also checked once against the real 0.1.2 ``stream`` (its imports stubbed,
``cuda`` mapped to the CPU): equal bits over two turns of six chunks of 50/37/12 frames.

HiFT runs at reduced width (base 32 channels instead of 512) with seeded random weights: the
wrapper's arithmetic does not depend on the width, and HiFT itself is checked against the vendor
in ``tests/oracle/test_oracle_hift.py``. CPU runtime: a few seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor

from adapters.token2wav.hift import HiFTConfig, HiFTGenerator, build_hift
from adapters.token2wav.vocoder_stream import (
    VocoderState,
    cross_fade,
    fade_window,
    vocode_chunk,
)
from engine.declaration_io import load_declaration

MEL_CACHE_FRAMES = load_declaration("minicpmo45_token2wav").values()["hift_mel_cache"]  # 8
TAIL = 3840  # 8 mel frames × 480 samples
CHUNK_FRAMES = (50, 50, 37, 50, 12)  # steady chunks, a flush-sized one, a short last one


class VocoderStream:
    """A :class:`VocoderState` holder for these tests (``SpeechStream`` holds it in the app)."""

    def __init__(self, hift: HiFTGenerator) -> None:
        self.hift = hift
        self.window = fade_window(MEL_CACHE_FRAMES * hift.config.samples_per_frame, "cpu")
        self.reset()

    def push(self, chunk_mel: Tensor, last_chunk: bool = False) -> Tensor:
        speech, self.state = vocode_chunk(self.hift, self.state, chunk_mel, self.window, last_chunk)
        return speech

    def reset(self) -> None:
        self.state = VocoderState.initial(self.hift.config.in_channels, "cpu")


@pytest.fixture(scope="module")
def hift() -> HiFTGenerator:
    return build_hift(3, HiFTConfig(base_channels=32, f0_channels=32))


def _chunks(seed: int) -> list[Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 80, frames, generator=generator) for frames in CHUNK_FRAMES]


def _reference_stream(hift: HiFTGenerator, chunks: list[Tensor], seed: int) -> list[Tensor]:
    """0.1.2's vocoder half, restated: dict caches, in-place fade on a clone, float64 window."""
    window = torch.from_numpy(np.hamming(2 * TAIL))
    caches = {"mel": torch.zeros(1, 80, 0), "source": torch.zeros(1, 1, 0),
              "speech": torch.zeros(1, 0)}  # fmt: skip
    outputs = []
    for index, chunk in enumerate(chunks):
        last_chunk = index == len(chunks) - 1
        first_chunk = caches["speech"].shape[-1] == 0
        mel = torch.concat([caches["mel"], chunk], dim=2)
        torch.manual_seed(seed + index)
        speech, source = hift(mel, caches["source"])
        if caches["speech"].shape[-1] > 0:
            half = int(window.shape[0] / 2)
            speech = speech.clone()
            speech[..., :half] = (
                speech[..., :half] * window[:half] + caches["speech"][..., -half:] * window[half:]
            )
        caches = {"mel": mel[..., -8:].clone().detach(),
                  "source": source[:, :, -TAIL:].clone().detach(),
                  "speech": speech[:, -TAIL:].clone().detach()}  # fmt: skip
        if not last_chunk:
            if first_chunk:
                speech = torch.cat([torch.zeros(1, TAIL), speech[:, :-TAIL]], dim=1)
            else:
                speech = speech[:, :-TAIL]
        outputs.append(speech)
    return outputs


def _our_stream(stream: VocoderStream, chunks: list[Tensor], seed: int) -> list[Tensor]:
    outputs = []
    for index, chunk in enumerate(chunks):
        torch.manual_seed(seed + index)
        outputs.append(stream.push(chunk, last_chunk=index == len(chunks) - 1))
    return outputs


def test_stream_equals_reference_over_two_turns(hift: HiFTGenerator) -> None:
    stream = VocoderStream(hift)
    for turn in range(2):  # the second turn starts from reset(), as at a turn boundary
        chunks = _chunks(40 + turn)
        expected = _reference_stream(hift, chunks, 100 * turn)
        got = _our_stream(stream, chunks, 100 * turn)
        for index, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert torch.equal(a, b), f"turn {turn}, chunk {index} differs from 0.1.2's stream"
        stream.reset()


def test_chunk_lengths_and_first_chunk_silence(hift: HiFTGenerator) -> None:
    outputs = _our_stream(VocoderStream(hift), _chunks(1), 0)
    lengths = [out.shape[1] for out in outputs]
    *steady, last = CHUNK_FRAMES
    assert lengths == [480 * f for f in steady] + [480 * (MEL_CACHE_FRAMES + last)]
    assert sum(lengths) == 480 * sum(CHUNK_FRAMES) + TAIL, "the last chunk flushes the held tail"
    assert not outputs[0][:, :TAIL].any(), "the first chunk opens with 3840 samples of silence"
    assert outputs[0][:, TAIL:].abs().sum() > 0


def test_single_chunk_stream_returns_everything(hift: HiFTGenerator) -> None:
    """First and last at once: no fade, no hold-back, no silence, just the vocoder's output."""
    chunk = _chunks(2)[0]
    torch.manual_seed(0)
    speech = VocoderStream(hift).push(chunk, last_chunk=True)
    torch.manual_seed(0)
    direct, _ = hift(chunk)
    assert torch.equal(speech, direct)


def test_state_holds_fresh_tails_of_the_right_extent(hift: HiFTGenerator) -> None:
    stream = VocoderStream(hift)
    assert stream.state.is_initial
    speech = stream.push(_chunks(3)[0])
    state = stream.state
    assert state.mel.shape == (1, 80, MEL_CACHE_FRAMES)
    assert state.source.shape == (1, 1, TAIL)
    assert state.speech.shape == (1, TAIL)
    kept = state.speech.clone()
    speech.fill_(7.0)  # the caller owns its output: scribbling on it must not reach the state
    assert torch.equal(state.speech, kept)
    stream.reset()
    assert stream.state.is_initial and stream.state.mel.shape == (1, 80, 0)


def test_reset_replays_a_fresh_stream(hift: HiFTGenerator) -> None:
    chunks = _chunks(4)[:3]
    stream = VocoderStream(hift)
    first = _our_stream(stream, chunks, 7)
    stream.reset()
    second = _our_stream(stream, chunks, 7)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_fade_window_is_numpys_hamming() -> None:
    window = fade_window(TAIL, "cpu")
    assert window.dtype == torch.float64
    assert torch.equal(window, torch.from_numpy(np.hamming(2 * TAIL)))


def test_cross_fade_rounds_a_float64_blend_once() -> None:
    generator = torch.Generator().manual_seed(8)
    speech, previous = torch.randn(1, 3 * TAIL, generator=generator), torch.randn(1, TAIL)
    window = fade_window(TAIL, "cpu")
    faded = cross_fade(speech, previous, window)
    blend = speech[0, :TAIL].double().numpy() * np.hamming(2 * TAIL)[:TAIL] + (
        previous[0].double().numpy() * np.hamming(2 * TAIL)[TAIL:]
    )
    assert torch.equal(faded[0, :TAIL], torch.from_numpy(blend.astype(np.float32)))
    assert torch.equal(faded[:, TAIL:], speech[:, TAIL:])
    assert faded.dtype == torch.float32


def test_rejects_chunks_it_cannot_stream(hift: HiFTGenerator) -> None:
    stream = VocoderStream(hift)
    with pytest.raises(AssertionError, match="one session"):
        stream.push(torch.randn(2, 80, 50))
    with pytest.raises(AssertionError, match="mel bins"):
        stream.push(torch.randn(1, 64, 50))
    with pytest.raises(AssertionError, match="float32"):
        stream.push(torch.randn(1, 80, 50, dtype=torch.float64))
    assert isinstance(VocoderState.initial(80, "cpu"), VocoderState)

"""Tokens to PCM: the flow stream followed by the streaming HiFT vocoder, under one arm.

The vocoder is an engine operator of its own (``hift_chunk``): under the replay arms one graph per
vocoder signature (chunk frames, whether its tails are empty, ``last_chunk``) replays it. Its
neural source filter draws device randomness on every call; the effect probe admits that and the
capture leaves the generator where eager would, so each replay draws what eager would have drawn.
Replayed calls use the capturable iSTFT (bit-equal to ``torch.istft``; ``torch.istft`` itself
syncs with the host and cannot be captured). The vocoder's tails are a few thousand samples, so
they keep the stock form (fresh tensors) in every arm.
"""

from __future__ import annotations

import torch
from torch import Tensor

from adapters.token2wav.hift import HiFTGenerator, IstftMode
from adapters.token2wav.stream import FlowStream
from adapters.token2wav.vocoder_stream import (
    VocoderState,
    fade_window,
    vocode_chunk,
)
from engine.arms import Arm
from engine.duplex import SpanFactory, untimed
from engine.replay import ReplayEngine
from engine.signature import Catalog, Signature, TensorSpec, contiguous_stride


class SpeechStream:
    """``push(tokens, last_chunk) -> (1, samples)`` float32 PCM at 24 kHz; an ``ArmedStream``."""

    def __init__(self, flow: FlowStream, hift: HiFTGenerator, replay: ReplayEngine) -> None:
        self.flow, self.hift, self.replay = flow, hift, replay
        self.device = hift.stft_window.device
        binding = flow.binding
        if hift.config.samples_per_frame != binding.values["samples_per_frame"]:
            raise ValueError(
                f"the vocoder makes {hift.config.samples_per_frame} samples a frame, declaration "
                f"{binding.declaration} states {binding.values['samples_per_frame']}: load the "
                "vocoder its declaration states"
            )
        self.cache_frames = binding.values["hift_mel_cache"]
        self.cache_samples = self.cache_frames * hift.config.samples_per_frame
        self.window = fade_window(self.cache_samples, self.device)
        self.state = VocoderState.initial(hift.config.in_channels, self.device)
        self.op = replay.register(
            "hift_chunk", self._vocode, catalog=self._catalog(), aliased=(), copy_out=True
        )
        self._stage: SpanFactory = untimed

    def set_stage_timer(self, span: SpanFactory | None) -> None:
        """Time the ``flow`` and ``vocoder`` stages of each push with ``span(name)`` (e.g.
        ``Metrics.span``), or stop timing with None. Timing never changes what is computed."""
        self._stage = span or untimed

    @property
    def arm(self) -> Arm:
        return self.flow.arm

    def set_arm(self, arm: Arm) -> None:
        """Takes effect at the next call; the vocoder's tails are the same in every arm."""
        self.flow.set_arm(arm)

    def reset(self) -> None:
        """Turn reset: the flow back to the prompt state, the vocoder's tails emptied."""
        self.flow.reset()
        self.state = VocoderState.initial(self.hift.config.in_channels, self.device)

    def push(self, tokens: Tensor, last_chunk: bool = False) -> Tensor:
        """Synthesize one token window: the flow's mel, then the vocoder under the arm."""
        with self._stage("flow"):
            mel = canonical(self.flow.chunk(tokens, last_chunk))
        state = self.state
        # Switch the iSTFT here, never inside ``_run``: ``set_istft`` checks its window on the
        # host, which a CUDA capture of the vocoder (after a live switch) cannot contain.
        mode: IstftMode = "capturable" if self.arm.replay else "torch"
        if self.hift.istft_mode != mode:
            self.hift.set_istft(mode)
        vocode = self.op if self.arm.replay else self._vocode_stock
        with self._stage("vocoder"):
            speech, *tails = vocode(state.mel, state.source, state.speech, mel, last_chunk)
        self.state = VocoderState(*(canonical(t) for t in tails))
        speech_out: Tensor = speech
        return speech_out

    def _vocode_stock(
        self, mel: Tensor, source: Tensor, speech: Tensor, chunk: Tensor, last: bool
    ) -> tuple[Tensor, ...]:
        """The eager vocoder: the vendor's ``torch.istft``."""
        return self._run(mel, source, speech, chunk, last, "torch")

    def _vocode(
        self, mel: Tensor, source: Tensor, speech: Tensor, chunk: Tensor, last: bool
    ) -> tuple[Tensor, ...]:
        """The replayed vocoder: the capturable iSTFT (same bits, no host sync)."""
        return self._run(mel, source, speech, chunk, last, "capturable")

    def _run(
        self,
        mel: Tensor,
        source: Tensor,
        speech: Tensor,
        chunk: Tensor,
        last: bool,
        istft: IstftMode,
    ) -> tuple[Tensor, ...]:
        if self.hift.istft_mode != istft:
            self.hift.set_istft(istft)
        state = VocoderState(mel, source, speech)
        out, nxt = vocode_chunk(self.hift, state, chunk, self.window, last)
        return out, nxt.mel, nxt.source, nxt.speech

    def _catalog(self) -> Catalog:
        """Every vocoder call the flow's classes produce, from and after a stream start."""
        n_mels, dev = self.hift.config.in_channels, self.device
        binding = self.flow.binding
        frames = {
            (binding.call_frames(c.tokens, c.last_chunk), c.last_chunk) for c in binding.classes
        }
        sigs = []
        for empty in (True, False):
            tails = (
                TensorSpec((1, n_mels, 0 if empty else self.cache_frames), _F32, dev),
                TensorSpec((1, 1, 0 if empty else self.cache_samples), _F32, dev),
                TensorSpec((1, 0 if empty else self.cache_samples), _F32, dev),
            )
            for f, last in frames:
                chunk = TensorSpec((1, n_mels, f), _F32, dev)
                sigs.append(Signature.of((*tails, chunk, last)))
        return Catalog(sigs)


def canonical(t: Tensor) -> Tensor:
    """``t`` with contiguous strides, size-1 and size-0 dims included (a copy only if needed):
    the same values in the one layout the catalog lists, so a vocoder signature never depends on
    how a producer happened to lay its output out."""
    if t.stride() == contiguous_stride(t.shape):
        return t
    return t.clone(memory_format=torch.contiguous_format)


_F32 = torch.float32

"""Streaming the original HiFT over mel chunks, as MiniCPM-o's 0.1.x packages do.

The semantics are ``Token2wav.stream`` of PyPI ``minicpmo`` 0.1.2 (``stepaudio2/token2wav.py``;
``stepaudio2-minicpmo`` 0.1.1 is the same without the first-chunk silence). Per chunk:

The cache is the declaration's ``hift_mel_cache`` (8) mel frames; with 480 samples a frame:

1. prepend the cached last 8 mel frames to the new frames (the vocoder's receptive field);
2. run HiFT with the cached 3840-sample source tail (8 frames × 480 samples) pasted over the start
   of the new source, so the excitation is continuous across the seam;
3. cross-fade the first 3840 samples with the cached speech tail under a Hamming(7680) window
   (rising half on the new speech, falling half on the old tail);
4. cache the last 8 mel frames, 3840 source samples and 3840 speech samples;
5. hold back the last 3840 samples (the next chunk fades them in) unless this is the last chunk;
   the first chunk of a stream is left-padded with 3840 samples of silence instead of a fade, so
   every non-final chunk of ``f`` new frames yields exactly ``480·f`` samples.

The state is an explicit :class:`VocoderState`, replaced (never mutated) by each call; its holder
is :class:`~adapters.token2wav.speech.SpeechStream`.

Exactness notes: the vendor's window is NumPy's float64 Hamming (torch's differs in the last bit),
and the fade is computed in float64 by type promotion, then rounded to float32 on assignment; we
keep both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from adapters.token2wav.hift import HiFTGenerator


@dataclass(frozen=True)
class VocoderState:
    """The carried tails of one stream. Empty (length 0) at the start of a stream.

    ``mel (1, n_mels, ≤ 8)``, ``source (1, 1, ≤ 3840)``, ``speech (1, ≤ 3840)``, all float32 on the
    vocoder's device. They are fresh copies, never views of a call's outputs.
    """

    mel: Tensor
    source: Tensor
    speech: Tensor

    @classmethod
    def initial(cls, n_mels: int, device: torch.device | str) -> VocoderState:
        """The state at a stream start or after a reset: every tail empty."""
        return cls(
            mel=torch.zeros(1, n_mels, 0, device=device),
            source=torch.zeros(1, 1, 0, device=device),
            speech=torch.zeros(1, 0, device=device),
        )

    @property
    def is_initial(self) -> bool:
        """True before the first chunk (no speech tail to fade with)."""
        return self.speech.shape[-1] == 0


def fade_window(cache_samples: int, device: torch.device | str) -> Tensor:
    """The vendor's cross-fade window: ``np.hamming(2 · cache_samples)``, float64, on ``device``."""
    return torch.from_numpy(np.hamming(2 * cache_samples)).to(device)


def cross_fade(speech: Tensor, previous: Tensor, window: Tensor) -> Tensor:
    """Fade ``speech``'s head in over ``previous``'s tail; returns a new tensor.

    ``window`` (float64, even length ``2n``): its rising half weights the first ``n`` samples of
    ``speech``, its falling half the last ``n`` of ``previous``. Blended in float64, kept float32.
    """
    overlap = window.shape[0] // 2
    faded = speech.clone()
    faded[..., :overlap] = (
        speech[..., :overlap] * window[:overlap] + previous[..., -overlap:] * window[overlap:]
    )
    return faded


def vocode_chunk(
    hift: HiFTGenerator,
    state: VocoderState,
    chunk_mel: Tensor,
    window: Tensor,
    last_chunk: bool = False,
) -> tuple[Tensor, VocoderState]:
    """One streaming step: ``(speech (1, samples) float32, next state)``. Draws device randomness.

    ``chunk_mel`` is ``(1, n_mels, frames)`` float32 (the flow's new frames only); ``window`` is
    :func:`fade_window` of the source cache, whose length (the cached mel frames × samples per
    frame) sets what is carried. A non-final chunk yields ``480 · frames``
    samples; the last chunk also flushes the held-back tail. Start the next stream (or turn) from
    :meth:`VocoderState.initial`.
    """
    _check_chunk(chunk_mel, state)
    cache_samples = window.shape[0] // 2
    cache_frames = cache_samples // hift.config.samples_per_frame
    mel = torch.cat([state.mel, chunk_mel], dim=2)
    speech, source = hift(mel, state.source)
    if not state.is_initial:
        speech = cross_fade(speech, state.speech, window)
    next_state = VocoderState(
        mel=mel[..., -cache_frames:].clone(),
        source=source[:, :, -cache_samples:].clone(),
        speech=speech[:, -cache_samples:].clone(),
    )
    if not last_chunk:
        speech = speech[:, :-cache_samples]
        if state.is_initial:  # silence stands in for the fade the first chunk has nothing for
            silence = speech.new_zeros(speech.shape[0], cache_samples)
            speech = torch.cat([silence, speech], dim=1)
    return speech, next_state


def _check_chunk(chunk_mel: Tensor, state: VocoderState) -> None:
    assert chunk_mel.dim() == 3 and chunk_mel.shape[0] == 1, (
        f"chunk_mel must be (1, n_mels, frames), got {tuple(chunk_mel.shape)}: stream one session"
    )
    assert chunk_mel.shape[1] == state.mel.shape[1], (
        f"chunk has {chunk_mel.shape[1]} mel bins, the stream {state.mel.shape[1]}: "
        "build the state with VocoderState.initial(n_mels=...) of the flow's output size"
    )
    assert chunk_mel.dtype == torch.float32, (
        f"chunk_mel is {chunk_mel.dtype}; the vocoder runs in float32: cast with .float()"
    )

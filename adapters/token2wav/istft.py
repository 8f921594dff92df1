"""Inverse STFT that a CUDA graph can capture, equal to ``torch.istft`` bit for bit.

``torch.istft`` cannot be captured: after the overlap-add it checks the window envelope for
near-zero values with ``.item()``, a host sync that invalidates a stream capture. The arithmetic
around that check is plain device work, so :func:`capturable_istft` replays it op for op, in
ATen's own order (``aten/src/ATen/native/SpectralOps.cpp``, ``istft``):

1. ``_fft_c2r`` of the frames, laid out ``(batch, frames, bins)`` as a transposed view, with the
   default ``1/n`` normalisation;
2. multiply by the window;
3. overlap-add with ``aten.unfold_backward`` (the very kernel ATen uses: each output sample sums
   the frames covering it in increasing frame order, starting from zero);
4. the window-square envelope, overlap-added the same way;
5. trim ``n_fft // 2`` samples at both ends (``center=True``) and divide by the envelope.

Only the envelope check is left out. It cannot fail for a window that satisfies the NOLA
condition at the given hop, so :func:`check_nola` proves that once, on the host, before any
capture (the vocoder's periodic Hann(16) at hop 4 has an envelope of at least 0.5).

Constraints: the spectrum is complex ``(batch, n_fft // 2 + 1, frames)`` (one-sided, batched; the
vocoder always passes a batch dimension), ``win_length == n_fft``, ``center=True``,
``normalized=False``, no ``length``. Under those, the output equals
``torch.istft(spec, n_fft, hop, n_fft, window=window)`` with ``torch.equal`` on CPU and CUDA.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

IstftFn = Callable[[Tensor, int, int, Tensor], Tensor]
"""``(spec, n_fft, hop_length, window) -> waveform``: the vocoder's iSTFT switch."""

_ENVELOPE_FLOOR = 1e-11  # the threshold torch.istft's own check uses


def torch_istft(spec: Tensor, n_fft: int, hop_length: int, window: Tensor) -> Tensor:
    """The vendor's call: ``torch.istft`` with ``center=True`` (eager only: it syncs the host)."""
    return torch.istft(spec, n_fft, hop_length, n_fft, window=window)


def capturable_istft(spec: Tensor, n_fft: int, hop_length: int, window: Tensor) -> Tensor:
    """``torch.istft(spec, n_fft, hop_length, n_fft, window=window)`` without the host sync.

    ``spec`` is complex ``(batch, n_fft // 2 + 1, frames)``; ``window`` is real ``(n_fft,)`` on the
    same device, satisfying NOLA at ``hop_length`` (call :func:`check_nola` once beforehand: this
    function does not check, because a check would sync the host). Returns ``(batch, samples)``
    with ``samples = hop_length * (frames - 1)``.
    """
    assert spec.dim() == 3 and spec.is_complex(), (
        f"capturable_istft takes a complex (batch, bins, frames) spectrum, got "
        f"{tuple(spec.shape)} {spec.dtype}: add the batch dimension / build it with torch.complex"
    )
    assert spec.size(1) == n_fft // 2 + 1, (
        f"spectrum has {spec.size(1)} bins, a one-sided n_fft={n_fft} spectrum has {n_fft // 2 + 1}"
    )
    frames = spec.size(2)
    signal_length = n_fft + hop_length * (frames - 1)
    # ATen transposes to (batch, frames, bins) and transforms the last dim of that strided view.
    frames_time = torch.fft.irfft(spec.transpose(1, 2), n=n_fft, dim=2)
    windowed = frames_time * window.view(1, 1, n_fft)
    signal = overlap_add(windowed, signal_length, hop_length)
    envelope = overlap_add(window.pow(2).expand(1, frames, n_fft), signal_length, hop_length)
    half = n_fft // 2
    return signal[:, half:-half] / envelope[:, half:-half]


def overlap_add(frames: Tensor, signal_length: int, hop_length: int) -> Tensor:
    """Sum ``(batch, frames, n_fft)`` frames placed every ``hop_length`` samples into a signal.

    This is ``aten.unfold_backward`` (the adjoint of ``Tensor.unfold``), the kernel ``istft`` uses,
    so the summation order, and with it every rounding, is ATen's.
    """
    batch, _, n_fft = frames.shape
    result: Tensor = torch.ops.aten.unfold_backward(
        frames, [batch, signal_length], 1, n_fft, hop_length
    )
    return result


def check_nola(window: Tensor, hop_length: int) -> None:
    """Raise if overlap-added ``window ** 2`` gets near zero anywhere ``torch.istft`` would look.

    Evaluated on the host for every frame count up to one full overlap (the envelope is periodic
    beyond it), so a window that passes here can never trip ``torch.istft``'s check at any length.
    """
    n_fft = window.numel()
    host = window.detach().to("cpu")
    half = n_fft // 2
    for frames in range(1, n_fft // hop_length + 2):
        signal_length = n_fft + hop_length * (frames - 1)
        squares = host.pow(2).expand(1, frames, n_fft)
        envelope = overlap_add(squares, signal_length, hop_length)[:, half:-half]
        if envelope.numel() and bool(envelope.abs().min() < _ENVELOPE_FLOOR):
            raise ValueError(
                f"window of length {n_fft} violates NOLA at hop {hop_length} ({frames} frames): "
                "torch.istft would reject it; use a window/hop pair whose squares overlap-add > 0"
            )

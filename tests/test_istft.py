"""The capturable iSTFT equals ``torch.istft`` bit for bit at the vocoder's parameters.

n_fft 16, hop 4, win_length 16, the vocoder's periodic Hann window (scipy's values), center=True.
Spectra are random with the vocoder's value ranges (magnitudes exp(N) clipped at 100, phases from
sin), over many frame counts, including the 120·f + 1 frames of an f-frame mel chunk, and batches.
CPU runtime: a few seconds. The ``gpu`` variants check the same equality on CUDA and through a
captured CUDA graph (which ``torch.istft`` itself cannot enter: its envelope check syncs the host).
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from adapters.token2wav.istft import capturable_istft, check_nola, overlap_add, torch_istft

N_FFT, HOP = 16, 4
BINS = N_FFT // 2 + 1


def _window(device: str = "cpu") -> Tensor:
    return torch.hann_window(N_FFT, periodic=True, dtype=torch.float64).float().to(device)


def _spectrum(batch: int, frames: int, generator: torch.Generator, device: str = "cpu") -> Tensor:
    """A vocoder-like spectrum: |X| = clip(exp(N(0, 2²)), 100), angle = sin(N(0, 3²))."""
    log_mag = torch.randn(batch, BINS, frames, generator=generator) * 2
    phase = torch.sin(torch.randn(batch, BINS, frames, generator=generator) * 3)
    magnitude = torch.clip(torch.exp(log_mag), max=1e2)
    spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
    return spec.to(device)


def _frame_counts() -> list[int]:
    """Short and odd counts, then the chunk sizes the stream produces (120 frames per mel frame)."""
    chunk_frames = [1, 8, 12, 37, 50, 58]
    return [2, 3, 4, 5, 7, 16, 33, 101, *(120 * f + 1 for f in chunk_frames)]


def test_equals_torch_istft_over_random_spectra() -> None:
    generator = torch.Generator().manual_seed(1234)
    window = _window()
    for frames in _frame_counts():
        for batch in (1, 2, 3):
            spec = _spectrum(batch, frames, generator)
            expected = torch_istft(spec, N_FFT, HOP, window)
            got = capturable_istft(spec, N_FFT, HOP, window)
            assert got.shape == expected.shape == (batch, HOP * (frames - 1))
            assert torch.equal(got, expected), f"differs at {frames} frames, batch {batch}"


def test_equals_torch_istft_on_extreme_values() -> None:
    """Clipped magnitudes (all 100), tiny ones, and a spectrum strided like the vocoder's slices."""
    generator = torch.Generator().manual_seed(7)
    window = _window()
    frames = 120 * 50 + 1
    phase = torch.randn(1, BINS, frames, generator=generator)
    for magnitude in (torch.full_like(phase, 100.0), torch.full_like(phase, 1e-30)):
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        assert torch.equal(capturable_istft(spec, N_FFT, HOP, window), torch.istft(
            spec, N_FFT, HOP, N_FFT, window=window
        ))  # fmt: skip
    wide = _spectrum(1, 2 * frames, generator)[:, :, ::2]  # a non-contiguous input
    assert torch.equal(capturable_istft(wide, N_FFT, HOP, window), torch_istft(
        wide, N_FFT, HOP, window
    ))  # fmt: skip


def test_overlap_add_sums_frames_at_hop() -> None:
    frames = torch.arange(2 * 3 * N_FFT, dtype=torch.float32).view(2, 3, N_FFT)
    signal = overlap_add(frames, N_FFT + 2 * HOP, HOP)
    expected = torch.zeros(2, N_FFT + 2 * HOP)
    for index in range(3):
        expected[:, index * HOP : index * HOP + N_FFT] += frames[:, index]
    assert torch.equal(signal, expected)


def test_check_nola_accepts_hann_and_rejects_gapped_windows() -> None:
    check_nola(_window(), HOP)
    gapped = torch.zeros(N_FFT)
    gapped[0] = 1.0  # covers one sample in four: the envelope has zeros
    with pytest.raises(ValueError, match="NOLA"):
        check_nola(gapped, HOP)


def test_rejects_real_or_unbatched_input() -> None:
    window = _window()
    with pytest.raises(AssertionError, match="complex"):
        capturable_istft(torch.randn(1, BINS, 10), N_FFT, HOP, window)
    with pytest.raises(AssertionError, match="complex"):
        capturable_istft(torch.randn(BINS, 10, dtype=torch.complex64), N_FFT, HOP, window)


@pytest.mark.gpu
def test_equals_torch_istft_on_cuda() -> None:
    generator = torch.Generator().manual_seed(99)
    window = _window("cuda")
    for frames in _frame_counts():
        spec = _spectrum(2, frames, generator, "cuda")
        expected = torch_istft(spec, N_FFT, HOP, window)
        assert torch.equal(capturable_istft(spec, N_FFT, HOP, window), expected), frames


@pytest.mark.gpu
def test_graph_replay_equals_torch_istft_on_cuda() -> None:
    """Capture once per frame count; replay on fresh inputs copied into the static spectrum."""
    generator = torch.Generator().manual_seed(5)
    window = _window("cuda")
    for frames in (120 * 50 + 1, 120 * 58 + 1):
        static_spec = _spectrum(1, frames, generator, "cuda")
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on the capture stream's side: cuFFT plans, pools
            for _ in range(2):
                capturable_istft(static_spec, N_FFT, HOP, window)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = capturable_istft(static_spec, N_FFT, HOP, window)
        for _ in range(3):
            fresh = _spectrum(1, frames, generator, "cuda")
            static_spec.copy_(fresh)
            static_out.fill_(float("nan"))  # a stale result can never pass for a replay
            graph.replay()
            assert torch.equal(static_out, torch_istft(fresh, N_FFT, HOP, window)), frames

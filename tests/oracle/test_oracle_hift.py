"""Our HiFT equals the vendor's ``HiFTGenerator`` bit for bit (minicpmo-utils 1.0.7 = 0.1.x).

Our seeded random weights are loaded into the vendor module with ``strict=True`` (proving names
and shapes), both run from the same generator state, and ``torch.equal`` must hold on the audio,
the source and the generator state left behind. The vendor HiFT module does not touch the
process-wide dynamo settings, so these run in-process.

CPU operating point (CI: 2 cores): the architecture at reduced width, base 128 channels instead of
512 (every layer, kernel, rate, harmonic and the iSTFT are as released; the width changes only
the channel counts), except the full-width name/shape check and one short full-width call. The
``gpu`` variants run the full 512-channel vocoder, and replay a captured CUDA graph of it
(capturable iSTFT) against the vendor.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
from torch import Tensor, nn

from adapters.token2wav.hift import HiFTConfig, HiFTGenerator, IstftMode, build_hift
from tests.oracle.vendor import require_vendor, vendor_module

pytestmark = pytest.mark.oracle

CPU_WIDTH = 128
CACHE_FRAMES, CHUNK_FRAMES, CACHE_SAMPLES = 8, 50, 8 * 480


def _pair(
    seed: int, width: int, device: str = "cpu", istft: IstftMode = "torch"
) -> tuple[HiFTGenerator, nn.Module]:
    """Our HiFT and the vendor's, holding the same (our) random weights."""
    hifigan = _hifigan()
    ours = build_hift(seed, HiFTConfig(base_channels=width, f0_channels=width), istft)
    with torch.random.fork_rng(devices=[]):  # the vendor's init draws from the global generator
        predictor = hifigan.ConvRNNF0Predictor(cond_channels=width)
        vendor = hifigan.HiFTGenerator(base_channels=width, f0_predictor=predictor)
    vendor.load_state_dict(ours.state_dict(), strict=True)
    return ours.to(device), vendor.to(device).eval()


@functools.cache
def _hifigan() -> ModuleType:
    require_vendor()
    return vendor_module("flashcosyvoice.modules.hifigan")


def _rng_state(device: str) -> Tensor:
    return torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()


def _run(model: nn.Module, seed: int, device: str, mel: Tensor, cache: Tensor | None) -> tuple[
    Tensor, Tensor, Tensor
]:  # fmt: skip
    """``(audio, source, generator state after)`` for one call from ``manual_seed(seed)``."""
    torch.manual_seed(seed)
    audio, source = model(mel, cache) if cache is not None else model(mel)
    return audio, source, _rng_state(device)


def _assert_same_call(
    ours: nn.Module, vendor: nn.Module, seed: int, mel: Tensor, cache: Tensor | None = None
) -> Tensor:
    device = mel.device.type
    got = _run(ours, seed, device, mel, cache)
    expected = _run(vendor, seed, device, mel, cache)
    for name, a, b in zip(("audio", "source", "generator state"), got, expected, strict=True):
        assert torch.equal(a, b), f"{name} differs from the vendor's ({tuple(mel.shape)})"
    audio = got[0]
    assert bool(torch.isfinite(audio).all()), "non-finite audio: the comparison would be vacuous"
    assert float((audio.abs() < 0.99).float().mean()) > 0.25, "audio mostly clamped: weak test"
    return got[1]


def _stream(ours: nn.Module, vendor: nn.Module, device: str, chunks: int) -> None:
    """``chunks`` calls of 8 cached + 50 new frames, each side carrying its own source tail."""
    generator = torch.Generator().manual_seed(11)
    frames = torch.randn(1, 80, CACHE_FRAMES + CHUNK_FRAMES * chunks, generator=generator)
    ours_cache = vendor_cache = torch.zeros(1, 1, 0, device=device)
    for index in range(chunks):
        start = index * CHUNK_FRAMES
        mel = frames[:, :, start : start + CACHE_FRAMES + CHUNK_FRAMES].to(device)
        torch.manual_seed(1000 + index)
        ours_audio, ours_source = ours(mel, ours_cache)
        torch.manual_seed(1000 + index)
        vendor_audio, vendor_source = vendor(mel, vendor_cache)
        assert torch.equal(ours_audio, vendor_audio), f"chunk {index}: audio differs"
        assert torch.equal(ours_source, vendor_source), f"chunk {index}: source differs"
        ours_cache = ours_source[:, :, -CACHE_SAMPLES:].clone()
        vendor_cache = vendor_source[:, :, -CACHE_SAMPLES:].clone()


def test_full_width_loads_strictly_into_vendor_and_equals_it() -> None:
    hifigan = _hifigan()
    ours = build_hift(0)
    with torch.random.fork_rng(devices=[]):
        vendor = hifigan.HiFTGenerator()
    vendor.load_state_dict(ours.state_dict(), strict=True)
    assert torch.equal(ours.stft_window, vendor.stft_window), "STFT window differs from scipy's"
    assert set(vendor.state_dict()) == set(ours.state_dict())
    mel = torch.randn(1, 80, 20, generator=torch.Generator().manual_seed(1))
    _assert_same_call(ours, vendor.eval(), 2, mel)  # one short call at full width


def test_one_shot_calls_equal_vendor() -> None:
    ours, vendor = _pair(1, CPU_WIDTH)
    generator = torch.Generator().manual_seed(2)
    for batch, frames in ((1, 58), (2, 13), (1, 1)):
        mel = torch.randn(batch, 80, frames, generator=generator)
        _assert_same_call(ours, vendor, 10 + frames, mel)
    mel = torch.randn(1, 80, 58, generator=generator)
    cache = torch.randn(1, 1, CACHE_SAMPLES, generator=generator) * 0.1
    _assert_same_call(ours, vendor, 3, mel, cache)


def test_capturable_istft_mode_equals_vendor() -> None:
    ours, vendor = _pair(4, CPU_WIDTH, istft="capturable")
    mel = torch.randn(1, 80, 58, generator=torch.Generator().manual_seed(5))
    _assert_same_call(ours, vendor, 6, mel)


def test_stream_of_ten_chunks_equals_vendor() -> None:
    ours, vendor = _pair(7, CPU_WIDTH)
    _stream(ours, vendor, "cpu", chunks=10)


@pytest.fixture
def deterministic_cudnn() -> Iterator[None]:
    """Pin cuDNN to deterministic algorithms: a transposed conv may otherwise pick an atomics-based
    kernel whose bits vary run to run, which no exactness claim could survive."""
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


@pytest.mark.gpu
@pytest.mark.usefixtures("deterministic_cudnn")
def test_full_width_calls_and_stream_equal_vendor_on_cuda() -> None:
    ours, vendor = _pair(21, 512, "cuda")
    mel = torch.randn(1, 80, 58, generator=torch.Generator().manual_seed(22)).cuda()
    _assert_same_call(ours, vendor, 23, mel)
    _stream(ours, vendor, "cuda", chunks=10)
    ours.set_istft("capturable")
    _assert_same_call(ours, vendor, 24, mel)


@pytest.mark.gpu
@pytest.mark.usefixtures("deterministic_cudnn")
def test_graph_replay_equals_vendor_eager_on_cuda() -> None:
    """Capture our full HiFT (capturable iSTFT) once; each replay, started from the generator state
    an eager vendor call started from, must give its audio, source and final generator state."""
    ours, vendor = _pair(31, 512, "cuda", istft="capturable")
    generator = torch.Generator().manual_seed(32)
    static_mel = torch.randn(1, 80, 58, generator=generator).cuda()
    static_cache = (torch.randn(1, 1, CACHE_SAMPLES, generator=generator) * 0.1).cuda()
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: cuDNN/cuFFT plans and workspaces before capture
        for _ in range(2):
            ours(static_mel, static_cache)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        audio, source = ours(static_mel, static_cache)
    for call in range(3):
        static_mel.copy_(torch.randn(1, 80, 58, generator=generator))
        before = torch.cuda.get_rng_state()
        expected_audio, expected_source = vendor(static_mel, static_cache)
        after = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(before)
        audio.fill_(float("nan"))  # a stale result can never pass for a replay
        graph.replay()
        assert torch.equal(audio, expected_audio), f"replay {call}: audio differs"
        assert torch.equal(source, expected_source), f"replay {call}: source differs"
        assert torch.equal(torch.cuda.get_rng_state(), after), "generator not where eager left it"

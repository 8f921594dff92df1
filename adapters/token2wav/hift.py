"""The original HiFT vocoder (``hift_original.pt``): mel frames → 24 kHz waveform.

HiFTNet = neural source filter (:mod:`.nsf`, driven by :mod:`.f0`) + an iSTFTNet generator:
three transposed-conv upsampling stages (8·5·3 = 120× the mel rate), each fused with a strided
conv of the source's STFT and averaged over three Snake resblocks, then a conv to a 9-bin
magnitude/phase spectrum and an iSTFT (n_fft 16, hop 4): 480 samples per mel frame.

Exactness: the eager path performs the vendor's (minicpmo-utils ``HiFTGenerator``) floating-point
operations in the vendor's order and shapes, so the same weights, input and generator state give
the same bits (``tests/oracle/test_oracle_hift.py``). Parameter names are the checkpoint's.

Capturability: constants live in non-persistent buffers (the vendor copies its STFT window and
harmonic multiples to the device on every call), nothing syncs with the host, and the iSTFT is a
switch: ``"torch"`` (the vendor's ``torch.istft``, eager only) or ``"capturable"``
(:func:`.istft.capturable_istft`, bit-identical, no host sync).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

from adapters.token2wav.config import CheckpointError
from adapters.token2wav.f0 import ConvRNNF0Predictor
from adapters.token2wav.istft import IstftFn, capturable_istft, check_nola, torch_istft
from adapters.token2wav.nsf import SourceModule
from adapters.weights import load_state, randomize_

IstftMode = Literal["torch", "capturable"]
_ISTFT: dict[str, IstftFn] = {"torch": torch_istft, "capturable": capturable_istft}

F0_READOUT_GAIN = 150.0
"""Random builds scale the F0 read-out so pitches land at speech scale (|N(0, 150²)| Hz): both
voiced (> 10 Hz) and unvoiced frames occur, so tests exercise the harmonic path, not only noise."""

POST_GAIN = 0.5
"""Random builds halve ``conv_post`` so log-magnitudes stay moderate and most samples stay inside
the ±0.99 clamp: a clamped sample would hide a difference from an exactness test."""


@dataclass(frozen=True)
class HiFTConfig:
    """The vendor's ``HiFTGenerator()`` defaults, which ``hift_original.pt`` was trained with."""

    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10.0
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    n_fft: int = 16
    hop_length: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    f0_channels: int = 512

    @property
    def samples_per_frame(self) -> int:
        """Waveform samples per mel frame: upsampling product × iSTFT hop (480 at 24 kHz)."""
        return math.prod(self.upsample_rates) * self.hop_length


class Snake(nn.Module):
    """``x + sin²(αx) / (α + 1e-9)`` with one learned α per channel (checkpoint: ``alpha``)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: Tensor) -> Tensor:
        alpha = self.alpha.unsqueeze(0).unsqueeze(-1)
        return x + (1.0 / (alpha + 1e-9)) * torch.pow(torch.sin(x * alpha), 2)


class ResBlock(nn.Module):
    """Per dilation: Snake → dilated conv → Snake → conv, added to the residual. Keeps length."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(_same_conv(channels, kernel_size, d) for d in dilations)
        self.convs2 = nn.ModuleList(_same_conv(channels, kernel_size, 1) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: Tensor) -> Tensor:
        for act1, conv1, act2, conv2 in zip(
            self.activations1, self.convs1, self.activations2, self.convs2, strict=True
        ):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


def _same_conv(channels: int, kernel_size: int, dilation: int) -> nn.Module:
    padding = (kernel_size * dilation - dilation) // 2
    conv = nn.Conv1d(channels, channels, kernel_size, 1, dilation=dilation, padding=padding)
    return _weight_normed(conv)


def _weight_normed(module: nn.Module) -> nn.Module:
    """The vendor's weight norm (parametrization API): checkpoint keys ``*.parametrizations.*``."""
    wrapped: nn.Module = weight_norm(module)
    return wrapped


class HiFTGenerator(nn.Module):
    """Mel ``(batch, 80, f)`` fp32 → ``(waveform (batch, 480·f), source (batch, 1, 480·f))``.

    ``cache_source`` (``(batch, 1, n)``, ``n ≤ 480·f``) overwrites the first ``n`` source samples,
    as the streaming wrapper does with the previous call's tail to avoid a glitch at the seam.
    Every call draws device randomness (see :mod:`.nsf`); run it under the generator state you
    want reproduced. ``istft`` picks the iSTFT (see the module docstring); both give equal bits.
    """

    def __init__(self, config: HiFTConfig | None = None, istft: IstftMode = "torch") -> None:
        super().__init__()
        cfg = config or HiFTConfig()
        if cfg.sampling_rate == 22050:
            raise ValueError(
                "22.05 kHz HiFT needs the vendor's first source module, which is not implemented: "
                "use the 24 kHz hift_original.pt"
            )
        self.config = cfg
        self.m_source = SourceModule(
            cfg.sampling_rate, cfg.samples_per_frame, cfg.nb_harmonics,
            cfg.nsf_alpha, cfg.nsf_sigma, cfg.nsf_voiced_threshold,
        )  # fmt: skip
        self.conv_pre = _weight_normed(
            nn.Conv1d(cfg.in_channels, cfg.base_channels, 7, 1, padding=3)
        )
        self.ups = nn.ModuleList(_upsampler(cfg, stage) for stage in range(self._stages))
        self.source_downs = nn.ModuleList(_source_down(cfg, stage) for stage in range(self._stages))
        self.source_resblocks = nn.ModuleList(
            ResBlock(_width(cfg, stage), kernel, dilations)
            for stage, (kernel, dilations) in enumerate(
                zip(cfg.source_resblock_kernel_sizes, cfg.source_resblock_dilations, strict=True)
            )
        )
        self.resblocks = nn.ModuleList(
            ResBlock(_width(cfg, stage), kernel, dilations)
            for stage in range(self._stages)
            for kernel, dilations in zip(
                cfg.resblock_kernel_sizes, cfg.resblock_dilations, strict=True
            )
        )
        last_width = _width(cfg, self._stages - 1)
        self.conv_post = _weight_normed(nn.Conv1d(last_width, cfg.n_fft + 2, 7, 1, padding=3))
        self.reflection_pad = nn.ReflectionPad1d((1, 0))
        self.f0_predictor = ConvRNNF0Predictor(cfg.in_channels, cfg.f0_channels)
        # scipy's periodic Hann, which the vendor uses: float64 values rounded once to float32.
        window = torch.hann_window(cfg.n_fft, periodic=True, dtype=torch.float64).float()
        self.stft_window: Tensor
        self.register_buffer("stft_window", window, persistent=False)
        self.set_istft(istft)

    @property
    def _stages(self) -> int:
        return len(self.config.upsample_rates)

    def set_istft(self, mode: IstftMode) -> None:
        """Switch the iSTFT implementation (``"capturable"`` is checked for NOLA here, once)."""
        if mode not in _ISTFT:
            raise ValueError(f"istft must be one of {sorted(_ISTFT)}, got {mode!r}")
        if mode == "capturable":
            check_nola(self.stft_window, self.config.hop_length)
        self.istft_mode = mode
        self._istft = _ISTFT[mode]

    def forward(
        self, speech_feat: Tensor, cache_source: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        # no_grad where the vendor has inference_mode: the same arithmetic, but the outputs stay
        # ordinary tensors, which carries and static graph buffers may later take in place.
        with torch.no_grad():
            source = self.excitation(speech_feat)
            if cache_source is not None and cache_source.shape[2] != 0:
                source[:, :, : cache_source.shape[2]] = cache_source
            return self.decode(speech_feat, source), source

    def excitation(self, speech_feat: Tensor) -> Tensor:
        """The source signal ``(batch, 1, 480·frames)`` from predicted F0 (draws randomness)."""
        f0 = self.f0_predictor(speech_feat)
        f0_samples = F.interpolate(
            f0[:, None], scale_factor=float(self.config.samples_per_frame), mode="nearest"
        ).transpose(1, 2)
        source: Tensor = self.m_source(f0_samples)
        return source.transpose(1, 2)

    def decode(self, mel: Tensor, source: Tensor) -> Tensor:
        """Generator proper: mel + source ``(batch, 1, samples)`` → clamped waveform."""
        source_spec = self._source_spectrum(source)
        x = self.conv_pre(mel)
        for stage, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, self.config.lrelu_slope))
            if stage == self._stages - 1:
                x = self.reflection_pad(x)
            x = x + self.source_resblocks[stage](self.source_downs[stage](source_spec))
            x = self._resblock_mean(stage, x)
        x = self.conv_post(F.leaky_relu(x))
        return self._waveform(x)

    def _resblock_mean(self, stage: int, x: Tensor) -> Tensor:
        count = len(self.config.resblock_kernel_sizes)
        blocks = self.resblocks[stage * count : (stage + 1) * count]
        total: Tensor = blocks[0](x)
        for block in blocks[1:]:
            total += block(x)  # the vendor's summation order: ((r0 + r1) + r2) / 3
        return total / count

    def _source_spectrum(self, source: Tensor) -> Tensor:
        """Real and imaginary STFT of the source, stacked on channels: ``(batch, n_fft + 2, t)``."""
        n_fft, hop = self.config.n_fft, self.config.hop_length
        spec = torch.stft(
            source.squeeze(1), n_fft, hop, n_fft, window=self.stft_window, return_complex=True
        )
        parts = torch.view_as_real(spec)
        return torch.cat([parts[..., 0], parts[..., 1]], dim=1)

    def _waveform(self, x: Tensor) -> Tensor:
        bins = self.config.n_fft // 2 + 1
        magnitude = torch.clip(torch.exp(x[:, :bins, :]), max=1e2)
        phase = torch.sin(x[:, bins:, :])  # sin() as the vendor has it (redundant, but trained so)
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        wave = self._istft(spec, self.config.n_fft, self.config.hop_length, self.stft_window)
        return torch.clamp(wave, -self.config.audio_limit, self.config.audio_limit)


def _width(cfg: HiFTConfig, stage: int) -> int:
    """Channels after upsampling stage ``stage``: halved at every stage."""
    return cfg.base_channels >> (stage + 1)


def _upsampler(cfg: HiFTConfig, stage: int) -> nn.Module:
    rate, kernel = cfg.upsample_rates[stage], cfg.upsample_kernel_sizes[stage]
    width_in = cfg.base_channels >> stage
    conv = nn.ConvTranspose1d(
        width_in, _width(cfg, stage), kernel, rate, padding=(kernel - rate) // 2
    )
    return _weight_normed(conv)


def _source_down(cfg: HiFTConfig, stage: int) -> nn.Module:
    """Strided conv taking the source STFT (hop rate) to this stage's rate."""
    # Rate of stage s relative to the STFT frames: product of the upsampling rates after s.
    stride = math.prod(cfg.upsample_rates[stage + 1 :])
    if stride == 1:
        return nn.Conv1d(cfg.n_fft + 2, _width(cfg, stage), 1, 1)
    return nn.Conv1d(cfg.n_fft + 2, _width(cfg, stage), stride * 2, stride, padding=stride // 2)


def build_hift(
    seed: int | None, config: HiFTConfig | None = None, istft: IstftMode = "torch"
) -> HiFTGenerator:
    """A HiFT in eval mode on the CPU, leaving the global generator untouched.

    ``seed=None``: placeholder values, to be overwritten by a checkpoint. Otherwise every parameter
    is drawn by :func:`adapters.weights.randomize_` from ``seed`` and then rescaled toward a trained
    vocoder's operating range (still random, still a function of ``seed`` only): Snake α to
    ``1 + 0.1·N(0, 1)`` (α is a frequency the vendor initialises at 1; near 0 the activation turns
    quadratic and blows up), the F0 read-out by :data:`F0_READOUT_GAIN`, ``conv_post`` by
    :data:`POST_GAIN`.
    """
    with torch.random.fork_rng(devices=[]):  # default inits must not shift anyone's seeds
        model = HiFTGenerator(config, istft).eval()
    if seed is not None:
        randomize_(model, seed)
        _toward_operating_range(model)
    return model


@torch.no_grad()
def _toward_operating_range(model: HiFTGenerator) -> None:
    for module in model.modules():
        if isinstance(module, Snake):
            module.alpha.add_(1.0)
    model.f0_predictor.classifier.weight.mul_(F0_READOUT_GAIN)
    # Weight norm: scaling the magnitude (original0) scales the weight; the direction is normalised.
    post = dict(model.conv_post.named_parameters())
    for name in ("parametrizations.weight.original0", "bias"):
        post[name].mul_(POST_GAIN)


def load_hift(
    path: Path, config: HiFTConfig | None = None, istft: IstftMode = "torch"
) -> HiFTGenerator:
    """Load ``hift_original.pt`` (or a 0.1.x ``hift.pt``) strictly; CPU, eval mode.

    A leading ``generator.`` is stripped from every key, as the vendor does; old-style weight-norm
    keys (``weight_g``/``weight_v``) are accepted by torch's own compatibility hook. Raises
    ``FileNotFoundError`` for a missing file and :class:`CheckpointError` naming every missing,
    unexpected or mis-shaped key.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"HiFT checkpoint {path} not found: point at the Token2Wav folder's hift_original.pt"
        )
    raw = load_state(path, CheckpointError)
    state = {key.removeprefix("generator."): value for key, value in raw.items()}
    model = build_hift(None, config, istft)
    _check_shapes(model, state, path)
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(
            f"{path} does not match the original HiFT: missing {_listing(result.missing_keys)}, "
            f"unexpected {_listing(result.unexpected_keys)} (is this the causal 1.0.7 hift.pt? "
            "the original vocoder is hift_original.pt)"
        )
    return model


def _check_shapes(model: nn.Module, state: dict[str, Tensor], path: Path) -> None:
    expected = model.state_dict()
    wrong = [
        f"{key} {tuple(value.shape)} (expected {tuple(expected[key].shape)})"
        for key, value in state.items()
        if key in expected and value.shape != expected[key].shape
    ]
    if wrong:
        raise CheckpointError(
            f"{path}: shape mismatch for {_listing(wrong)}: the checkpoint was trained with "
            "another HiFTConfig; pass the matching config"
        )


def _listing(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit]) or "none"
    return f"[{shown}{f', … {len(items) - limit} more' if len(items) > limit else ''}]"

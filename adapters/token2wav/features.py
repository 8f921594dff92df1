"""The acoustic features the voice prompt needs, computed as the vendor computes them, in torch.

minicpmo-utils 1.0.7 (``stepaudio2/token2wav.py`` ``_prepare_prompt``) turns a prompt recording
into three inputs of the flow:

- speech tokens: 16 kHz audio -> Whisper-style 128-bin log-mel (``s3tokenizer.log_mel_spectrogram``)
  -> ``speech_tokenizer_v2_25hz``;
- the speaker x-vector: the same 16 kHz audio -> Kaldi fbank, 80 bins
  (``torchaudio.compliance.kaldi.fbank``), mean over time subtracted -> ``campplus``;
- the prompt mel: 24 kHz audio -> 80-bin log-mel (Matcha/CosyVoice ``mel_spectrogram``).

The vendor resamples with ``torchaudio.transforms.Resample`` and builds its mel filters with
librosa; neither library is a dependency here (torchaudio's native part does not load beside our
torch), so this module holds our own versions. Each one repeats the reference's operations in the
same order and dtypes, so the results are equal bit for bit, not just close (the oracle tests
compare against the vendor's and torchaudio's own code). Everything runs on the CPU in float32:
the vendor computes these features on the CPU too, and a prompt is prepared once per voice.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from adapters.token2wav.voice_limits import HOP_16K, TOKENIZER_RATE

# The rates the models were trained at: tokenizer and speaker model 16 kHz (TOKENIZER_RATE, where
# the prompt's limits read it), flow mel 24 kHz.
MEL_RATE = 24_000


def resample(waveform: Tensor, orig_freq: int, new_freq: int) -> Tensor:
    """``torchaudio.transforms.Resample(orig_freq, new_freq)(waveform)`` with its defaults.

    Band-limited sinc interpolation with a Hann window (``lowpass_filter_width`` 6, ``rolloff``
    0.99), the kernel computed in float64 and kept in float32, exactly as the transform caches it
    (the functional ``torchaudio.functional.resample`` builds it in the input's dtype instead,
    which gives other bits). ``waveform`` is float32 ``(..., time)``; rates are integers in Hz.
    """
    if orig_freq == new_freq:
        return waveform
    gcd = math.gcd(orig_freq, new_freq)
    kernel, width = _sinc_kernel(orig_freq // gcd, new_freq // gcd)
    orig, new = orig_freq // gcd, new_freq // gcd
    shape = waveform.size()
    flat = waveform.reshape(-1, shape[-1])
    count, length = flat.shape
    padded = F.pad(flat, (width, width + orig))
    out = F.conv1d(padded[:, None], kernel, stride=orig).transpose(1, 2).reshape(count, -1)
    # The reference rounds the target length through a float32 tensor; so do we, for equal
    # lengths on every input (float64 arithmetic would round up one sample more at times).
    target = int(torch.ceil(torch.as_tensor(new * length / orig)).long())
    return out[..., :target].reshape(*shape[:-1], -1)


@cache
def _sinc_kernel(orig: int, new: int, zeros: int = 6, rolloff: float = 0.99) -> tuple[Tensor, int]:
    """The resampling filter bank ``(new, 1, 2 * width + orig)`` and its half width."""
    base = min(orig, new) * rolloff
    width = math.ceil(zeros * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    # The phase term is an int64 range divided in the default dtype (float32) before it meets
    # the float64 index grid: the reference does this, and the kernel's bits depend on it.
    t = torch.arange(0, -new, -1)[:, None, None] / new + idx
    t = (t * base).clamp_(-zeros, zeros)
    window = torch.cos(t * math.pi / zeros / 2) ** 2
    t = t * math.pi
    kernels = torch.where(t == 0, torch.tensor(1.0).to(t), t.sin() / t)
    kernels *= window * (base / orig)
    return kernels.to(torch.float32), width


def slaney_mel_filters(
    sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None
) -> np.ndarray:
    """``librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax)`` (Slaney scale and norm), float32.

    Triangles on the Slaney mel scale (linear below 1 kHz, logarithmic above), each scaled to
    unit area; computed in float64 and stored in float32 as librosa does. Shape
    ``(n_mels, n_fft // 2 + 1)``.
    """
    fmax = float(sample_rate) / 2 if fmax is None else fmax
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    mel_edges = np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2)
    hz_edges = _mel_to_hz(mel_edges)
    widths = np.diff(hz_edges)
    ramps = np.subtract.outer(hz_edges, fft_freqs)
    weights = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    for i in range(n_mels):
        lower = -ramps[i] / widths[i]
        upper = ramps[i + 2] / widths[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (hz_edges[2 : n_mels + 2] - hz_edges[:n_mels]))[:, np.newaxis]
    return weights


# Slaney's scale: 3 mels per 200 Hz up to 1 kHz, then logarithmic. numpy's log/exp as librosa
# uses them (not math's): the float64 edges must round to the same float32 filters.
_F_SP, _MIN_LOG_HZ = 200.0 / 3, 1000.0
_MIN_LOG_MEL, _LOGSTEP = _MIN_LOG_HZ / _F_SP, np.log(6.4) / 27.0


def _hz_to_mel(hz: float) -> float:
    if hz < _MIN_LOG_HZ:
        return hz / _F_SP
    return float(_MIN_LOG_MEL + np.log(hz / _MIN_LOG_HZ) / _LOGSTEP)


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hz = _F_SP * mels
    log_part = mels >= _MIN_LOG_MEL
    hz[log_part] = _MIN_LOG_HZ * np.exp(_LOGSTEP * (mels[log_part] - _MIN_LOG_MEL))
    return hz


@cache
def _mel_basis(sample_rate: int, n_fft: int, n_mels: int, fmax: float | None) -> Tensor:
    return torch.from_numpy(slaney_mel_filters(sample_rate, n_fft, n_mels, fmax=fmax))


def whisper_log_mel(audio: Tensor, n_mels: int = 128) -> Tensor:
    """The speech tokenizer's input: ``s3tokenizer.log_mel_spectrogram(audio, n_mels)``.

    Whisper's recipe at 16 kHz: centred STFT (400-sample Hann window, hop 160), power, Slaney mel
    filters, log10 clamped at 1e-10, floored 8 (decades) below the maximum, then ``(x + 4) / 4``.
    ``audio`` is float32 ``(time,)`` at 16 kHz; returns ``(n_mels, time // 160)``: the STFT's
    last frame is dropped, as Whisper does.
    """
    window = torch.hann_window(400)
    stft = torch.stft(audio, 400, HOP_16K, window=window, return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    mel_spec = _mel_basis(TOKENIZER_RATE, 400, n_mels, None) @ magnitudes
    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


# Kaldi's frame geometry at 16 kHz: 25 ms windows every 10 ms, FFT padded to a power of two.
_FBANK_WINDOW, _FBANK_SHIFT, _FBANK_FFT = 400, 160, 512
FBANK_MIN_SAMPLES = _FBANK_WINDOW


def kaldi_fbank(audio: Tensor, num_mel_bins: int = 80) -> Tensor:
    """``torchaudio.compliance.kaldi.fbank(audio[None], num_mel_bins, dither=0,
    sample_frequency=16000)``: the speaker model's input before mean normalisation.

    Kaldi's defaults otherwise: frames that fit whole (``snip_edges``), per-frame DC removal,
    pre-emphasis 0.97, Povey window (Hann to the power 0.85), power spectrum, mel triangles on
    Kaldi's mel scale (1127 ln(1 + f/700)) from 20 Hz to Nyquist, natural log floored at float32
    epsilon. ``audio`` is float32 ``(time,)`` at 16 kHz, at least 400 samples; returns
    ``(frames, num_mel_bins)`` with ``frames = 1 + (time - 400) // 160``.
    """
    if audio.numel() < _FBANK_WINDOW:
        raise ValueError(f"fbank needs at least {_FBANK_WINDOW} samples, got {audio.numel()}")
    frames = 1 + (audio.numel() - _FBANK_WINDOW) // _FBANK_SHIFT
    strided = audio.as_strided((frames, _FBANK_WINDOW), (_FBANK_SHIFT * audio.stride(0), 1))
    strided = strided - torch.mean(strided, dim=1).unsqueeze(1)
    previous = F.pad(strided.unsqueeze(0), (1, 0), mode="replicate").squeeze(0)
    strided = strided - 0.97 * previous[:, :-1]
    window = torch.hann_window(_FBANK_WINDOW, periodic=False, dtype=audio.dtype).pow(0.85)
    strided = strided * window.unsqueeze(0)
    strided = F.pad(strided.unsqueeze(0), (0, _FBANK_FFT - _FBANK_WINDOW)).squeeze(0)
    spectrum = torch.fft.rfft(strided).abs().pow(2.0)
    banks = F.pad(_kaldi_mel_banks(num_mel_bins), (0, 1), mode="constant", value=0)
    energies = torch.mm(spectrum, banks.T)
    return torch.max(energies, torch.tensor(torch.finfo(torch.float).eps)).log()


@cache
def _kaldi_mel_banks(num_bins: int, low_freq: float = 20.0) -> Tensor:
    """Kaldi's triangular banks ``(num_bins, 256)`` over the FFT bins below Nyquist, float32."""
    nyquist = 0.5 * TOKENIZER_RATE
    bin_width = TOKENIZER_RATE / _FBANK_FFT
    mel_low, mel_high = _kaldi_mel(low_freq), _kaldi_mel(nyquist)
    delta = (mel_high - mel_low) / (num_bins + 1)
    index = torch.arange(num_bins).unsqueeze(1)
    left = mel_low + index * delta
    center = mel_low + (index + 1.0) * delta
    right = mel_low + (index + 2.0) * delta
    mel = 1127.0 * (1.0 + (bin_width * torch.arange(_FBANK_FFT / 2)) / 700.0).log()
    mel = mel.unsqueeze(0)
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    return torch.max(torch.zeros(1), torch.min(up, down))


def _kaldi_mel(hz: float) -> float:
    return 1127.0 * math.log(1.0 + hz / 700.0)


# The flow's mel (Matcha/CosyVoice ``mel_spectrogram`` at Step-Audio2's values): one frame per
# 480 samples = 20 ms at 24 kHz, 80 bins up to 8 kHz.
MEL_FFT, MEL_HOP, MEL_BINS, MEL_FMAX = 1920, 480, 80, 8000.0


def prompt_mel(audio: Tensor) -> Tensor:
    """The flow's conditioning mel: ``matcha.utils.audio.mel_spectrogram(audio)`` at
    n_fft 1920, hop 480, window 1920, 80 bins, 0–8000 Hz, ``center=False``.

    Reflect-pads (n_fft - hop) / 2 samples each side, magnitude ``sqrt(re² + im² + 1e-9)``,
    Slaney mel filters, natural log clamped at 1e-5. ``audio`` is float32 ``(1, time)`` at
    24 kHz, longer than 720 samples; returns ``(1, 80, time // 480)``.
    """
    pad = (MEL_FFT - MEL_HOP) // 2
    audio = F.pad(audio.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    stft = torch.stft(
        audio,
        MEL_FFT,
        hop_length=MEL_HOP,
        win_length=MEL_FFT,
        window=torch.hann_window(MEL_FFT),
        center=False,
        normalized=False,
        onesided=True,
        return_complex=True,
    )
    spec = torch.sqrt(torch.view_as_real(stft).pow(2).sum(-1) + 1e-9)
    spec = torch.matmul(_mel_basis(MEL_RATE, MEL_FFT, MEL_BINS, MEL_FMAX), spec)
    return torch.log(torch.clamp(spec, min=1e-5))

"""Neural source filter of the original HiFT vocoder: F0 → harmonic excitation at 24 kHz.

At 24 kHz the vendor uses its second source module (``SourceModuleHnNSF2`` / ``SineGen2``): phases
are integrated at the frame rate (the sample-rate F0 is linearly decimated by the upsampling
factor, cumulatively summed, then linearly interpolated back), which keeps float32 phase error
bounded over long signals.

Device randomness (the paper's effect classification admits it; host randomness would be frozen
into a CUDA graph): every call draws, on the F0's device and in this order,

1. ``torch.rand(batch, harmonics + 1)``   initial phases (the fundamental's is zeroed),
2. ``torch.randn_like`` of the sines ``(batch, samples, harmonics + 1)``   additive noise,
3. ``torch.randn_like`` of the voicing mask ``(batch, samples, 1)``   the noise branch, which the
   vocoder discards but the vendor draws, so the generator advances exactly as it does there.

The same generator state therefore gives the same bits as the vendor module. Nothing here syncs
with the host, so a call can be captured and replayed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SineGenerator(nn.Module):
    """Harmonic sines plus noise from a sample-rate F0 ``(batch, samples, 1)`` in Hz.

    ``samples`` must be a multiple of ``upsample_scale`` (the vocoder's 480 samples per mel frame):
    phases are integrated at the frame rate. Returns ``(sines, voiced)``: the noisy, voicing-gated
    harmonics ``(batch, samples, harmonics + 1)`` and the float voiced mask ``(batch, samples, 1)``.
    """

    def __init__(
        self,
        sampling_rate: int,
        upsample_scale: int,
        harmonic_num: int,
        sine_amp: float,
        noise_std: float,
        voiced_threshold: float,
    ) -> None:
        super().__init__()
        self.sampling_rate = sampling_rate
        self.upsample_scale = upsample_scale
        self.sine_amp = sine_amp
        self.noise_std = noise_std
        self.voiced_threshold = voiced_threshold
        # A device-resident constant (the vendor builds it on the host and copies it every call,
        # which a CUDA graph cannot capture). Not a parameter: no checkpoint carries it.
        multiples = torch.arange(1, harmonic_num + 2, dtype=torch.float32).view(1, 1, -1)
        self.harmonic_multiples: Tensor
        self.register_buffer("harmonic_multiples", multiples, persistent=False)

    def forward(self, f0: Tensor) -> tuple[Tensor, Tensor]:
        harmonics_hz = torch.multiply(f0, self.harmonic_multiples)
        sines = self._sines(harmonics_hz) * self.sine_amp
        voiced = (f0 > self.voiced_threshold).type(torch.float32)
        # Voiced samples get a little noise; unvoiced ones noise of about the sine amplitude.
        noise_amp = voiced * self.noise_std + (1 - voiced) * self.sine_amp / 3
        noise = noise_amp * torch.randn_like(sines)
        return sines * voiced + noise, voiced

    def _sines(self, harmonics_hz: Tensor) -> Tensor:
        """``sin`` of the integrated phase, with a random initial phase per overtone."""
        cycles = (harmonics_hz / self.sampling_rate) % 1
        initial = torch.rand(harmonics_hz.shape[0], harmonics_hz.shape[2], device=cycles.device)
        initial[:, 0] = 0  # the fundamental starts at phase zero
        cycles[:, 0, :] = cycles[:, 0, :] + initial
        frame_cycles = F.interpolate(
            cycles.transpose(1, 2), scale_factor=1 / self.upsample_scale, mode="linear"
        ).transpose(1, 2)
        phase = torch.cumsum(frame_cycles, dim=1) * 2 * math.pi
        phase = F.interpolate(
            phase.transpose(1, 2) * self.upsample_scale,
            scale_factor=float(self.upsample_scale),
            mode="linear",
        ).transpose(1, 2)
        return torch.sin(phase)


class SourceModule(nn.Module):
    """Merge the harmonics into one excitation: ``tanh(linear(sines))``, ``(batch, samples, 1)``.

    The checkpoint names its one layer ``m_source.l_linear``. The discarded noise branch is still
    drawn (see the module docstring) so that the generator state matches the vendor's.
    """

    def __init__(
        self,
        sampling_rate: int,
        upsample_scale: int,
        harmonic_num: int = 8,
        sine_amp: float = 0.1,
        add_noise_std: float = 0.003,
        voiced_threshold: float = 10.0,
    ) -> None:
        super().__init__()
        self.sine_amp = sine_amp
        self.l_sin_gen = SineGenerator(
            sampling_rate, upsample_scale, harmonic_num, sine_amp, add_noise_std, voiced_threshold
        )
        self.l_linear = nn.Linear(harmonic_num + 1, 1)

    def forward(self, f0: Tensor) -> Tensor:
        with torch.no_grad():
            sines, voiced = self.l_sin_gen(f0)
        excitation = torch.tanh(self.l_linear(sines))
        # Drawn only to advance the generator as the vendor's noise branch does.
        torch.randn_like(voiced)
        return excitation

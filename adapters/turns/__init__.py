"""Who holds the floor, shared by every family that hears the microphone through silero-vad
(the synthetic backbone, MiniCPM-o, the basic voice): streaming voice activity (``vad``) and the
turn-taking state machine over its probabilities (``taker``). Nothing here is model-family
specific.
"""

from adapters.turns.taker import Floor, TurnEvent, TurnParams, TurnTaker
from adapters.turns.vad import VoiceActivity

__all__ = ["Floor", "TurnEvent", "TurnParams", "TurnTaker", "VoiceActivity"]

"""What the user sets live on the audio path: output volume, mute, microphone gain. No Qt.

One :class:`AudioControls` lives in the controller and outlasts sessions. The GUI thread writes
its fields (plain floats and a bool: each assignment is atomic under the interpreter lock); the
engine thread copies them into its :class:`~app.audio.limiter.OutputStage` and
:class:`~app.audio.limiter.MicStage` once per period, so a change is heard at the next period.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GAIN_RANGE_DB", "VOLUME_RANGE_DB", "AudioControls"]

VOLUME_RANGE_DB = (-60, 0)  # the volume slider: never louder than the model's own level
GAIN_RANGE_DB = (-20, 20)  # the microphone gain slider


@dataclass
class AudioControls:
    volume_db: float = 0.0
    muted: bool = False
    mic_gain_db: float = 0.0

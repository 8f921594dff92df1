"""Turn-taking over per-window speech probabilities: who holds the floor, window by window.

Pure Python (no torch, no audio): :class:`TurnTaker` sees one voice-activity probability per
window (32 ms for silero-vad at 16 kHz) and says when the assistant takes the turn and when the
user barges in. The assistant's own answer ending is told to it (:meth:`TurnTaker.finish`).

* Voicing has hysteresis: a window turns *voiced* at ``prob >= on`` and stays voiced until
  ``prob < off`` (0.5 / 0.35, silero's own defaults), so a flickering probability near one
  threshold does not chop speech into pieces.
* **Take**: after the user spoke (at least ``min_speech_s`` of voiced windows), ``pause_s`` of
  unvoiced windows hand the turn to the assistant.
* **Barge-in**: while the assistant speaks, ``barge_in_s`` of consecutive voiced windows stop it.
* ``hold=True`` defers a take or a barge-in (the counters keep running). A barge-in met while
  held fires at the first window not held; a take fires there only if the user is still silent.
  A caller that resolves a whole period at once holds after the period's first event, so a
  period has at most one: a turn never starts and ends inside one period.
* A user speech shorter than ``min_speech_s`` followed by a pause is forgotten (no answer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Floor", "TurnEvent", "TurnParams", "TurnTaker"]


class Floor(StrEnum):
    """Who holds the floor (the taker's state)."""

    IDLE = "idle"  # nobody spoke since the last turn ended (or since the start)
    USER = "user"  # the user is talking (or paused for less than the pause)
    ASSISTANT = "assistant"  # the assistant is speaking


class TurnEvent(StrEnum):
    """What a window changed."""

    NONE = "none"
    TAKE = "take"  # the assistant takes the turn (starts answering)
    BARGE_IN = "barge_in"  # the user interrupted the assistant (its turn ends at once)


@dataclass(frozen=True)
class TurnParams:
    """Turn-taking thresholds; durations in seconds, rounded up to whole windows.

    Args:
        on: probability at which an unvoiced window becomes voiced.
        off: probability below which a voiced window becomes unvoiced (``off <= on``).
        pause_s: silence after the user's speech before the assistant answers.
        barge_in_s: continuous user speech that interrupts the assistant.
        min_speech_s: shortest user speech that earns an answer (clicks and coughs do not).
        window_s: seconds per probability (silero-vad at 16 kHz: 512 / 16000).
    """

    on: float = 0.5
    off: float = 0.35
    pause_s: float = 0.6
    barge_in_s: float = 0.3
    min_speech_s: float = 0.2
    window_s: float = 512 / 16000

    def __post_init__(self) -> None:
        if not 0.0 <= self.off <= self.on <= 1.0:
            raise ValueError(f"need 0 <= off <= on <= 1, got off={self.off}, on={self.on}")
        durations = {
            "pause_s": self.pause_s,
            "barge_in_s": self.barge_in_s,
            "min_speech_s": self.min_speech_s,
            "window_s": self.window_s,
        }
        bad = {k: v for k, v in durations.items() if not v > 0}
        if bad:
            raise ValueError(f"TurnParams durations must be > 0 seconds, got {bad}")

    def windows(self, seconds: float) -> int:
        """Whole windows covering ``seconds`` (at least one)."""
        return max(1, math.ceil(seconds / self.window_s - 1e-9))


class TurnTaker:
    """The turn-taking state machine; feed it one probability per window with :meth:`update`."""

    def __init__(self, params: TurnParams | None = None) -> None:
        self.params = params or TurnParams()
        self._pause = self.params.windows(self.params.pause_s)
        self._barge = self.params.windows(self.params.barge_in_s)
        self._min_speech = self.params.windows(self.params.min_speech_s)
        self.reset()

    def reset(self) -> None:
        """Back to the start: nobody spoke, the assistant silent."""
        self.floor = Floor.IDLE
        self.voiced = False
        self._run = 0  # consecutive windows in the current voicing (voiced or not)
        self._speech = 0  # voiced windows of the user's current turn
        self._barged = False  # a barge-in met while held, not yet reported

    @property
    def speaking(self) -> bool:
        """True while the assistant holds the turn."""
        return self.floor is Floor.ASSISTANT

    @property
    def heard_enough(self) -> bool:
        """True when the user's turn has ``min_speech_s`` of voice (a pause would take it)."""
        return self._speech >= self._min_speech

    def update(self, prob: float, hold: bool = False) -> TurnEvent:
        """One window's speech probability; ``hold`` defers a take or barge-in to a later window."""
        self._voice(prob)
        if self.floor is Floor.ASSISTANT:
            return self._while_speaking(hold)
        if self.voiced:
            self.floor = Floor.USER
            self._speech += 1
            return TurnEvent.NONE
        if self.floor is Floor.USER and self._run >= self._pause:
            if not self.heard_enough:  # a click or a cough: forget it
                self.floor, self._speech = Floor.IDLE, 0
            elif not hold:
                self.floor, self._speech = Floor.ASSISTANT, 0
                return TurnEvent.TAKE
        return TurnEvent.NONE

    def _while_speaking(self, hold: bool) -> TurnEvent:
        # A barge-in is latched: speech that met the duration while held still interrupts at the
        # first window not held, even if the user has stopped by then.
        if self.voiced and self._run >= self._barge:
            self._barged = True
        if not self._barged or hold:
            return TurnEvent.NONE
        self.floor, self._barged = Floor.USER, False
        self._speech = self._run if self.voiced else self._min_speech
        return TurnEvent.BARGE_IN

    def finish(self) -> None:
        """The assistant's answer ended by itself: the floor goes back to the user."""
        if self.floor is Floor.ASSISTANT:
            # Speech already under way when the answer ends counts toward the user's next turn.
            self.floor = Floor.USER if self.voiced else Floor.IDLE
            self._speech = self._run if self.voiced else 0
            self._barged = False

    def _voice(self, prob: float) -> None:
        """Hysteresis voicing; ``_run`` counts windows since the voicing last flipped."""
        voiced = prob >= self.params.on if not self.voiced else prob >= self.params.off
        self._run = self._run + 1 if voiced == self.voiced else 1
        self.voiced = voiced

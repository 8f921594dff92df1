"""A period model from three parts: a backbone that emits speech tokens, a windower, a synthesizer.

The Token2Wav families (MiniCPM-o 4.5's and Lychee-FD's decoder) speak this way. Every period
:meth:`WindowedSynthesis.step`:

1. lets the backbone hear the period's microphone audio and decide: listen, or speak and emit
   speech tokens (span ``backbone``);
2. cuts the tokens into the decoder's calls (:class:`~engine.windows.TokenWindower`: flush at a
   turn's start, steady windows, ``last_chunk`` at its end) and pushes each through the
   synthesizer under the current arm (span ``synthesis``; a synthesizer with stage timing adds
   ``flow`` and ``vocoder`` inside), resetting it to the prompt-only state after a last call.

MiniCPM-o's pattern fills exactly one period per speaking period (a 28-token flush or steady
window is 50 frames = 1 s). Windows that do not divide the period (Lychee-FD: 20-frame calls, 2 or
3 per period) leave a short silence in a turn's first period and then run one call behind; no
audio is dropped (the loop's playout queue holds it).

Threads: the engine thread only. Nothing here knows a model family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from engine.arms import Arm
from engine.duplex import PeriodStep, Phase, SpanFactory, StageTimed, untimed
from engine.windows import TokenWindower

__all__ = ["Backbone", "BackboneStep", "Synthesizer", "WindowedSynthesis"]


@dataclass(frozen=True)
class BackboneStep:
    """A backbone's decision for one period."""

    phase: Phase  # what the assistant did this period
    tokens: Tensor  # (1, n) int32 speech tokens emitted this period, n >= 0, on the synth device
    turn_end: bool  # the assistant's turn ended during this period (natural end or barge-in)
    barge_in: bool  # the user interrupted the assistant (implies turn_end)
    voice_prob: float  # user voice-activity probability for the UI, 0..1
    text: str = ""  # what the assistant said this period, where the backbone has text


class Backbone(Protocol):
    """A full-duplex speech model's language side: hears a period, decides, emits tokens."""

    period_s: float  # native period (1.0 for the token2wav family)
    input_rate: int  # 16000

    def step(self, mic: np.ndarray) -> BackboneStep:
        """``mic``: float32 mono, ``period_s · input_rate`` samples."""
        ...

    def reset(self) -> None: ...


class Synthesizer(Protocol):
    """Speech tokens to PCM under an arm (``adapters.token2wav.speech.SpeechStream`` conforms)."""

    @property
    def arm(self) -> Arm: ...

    def set_arm(self, arm: Arm) -> None: ...

    def push(self, tokens: Tensor, last_chunk: bool = False) -> Tensor:
        """``(1, samples)`` float32 PCM at the output rate."""
        ...

    def reset(self) -> None: ...


class WindowedSynthesis:
    """Backbone -> windower -> synthesizer, one period at a time; a ``PeriodModel`` whose
    stages (``backbone``, ``synthesis``, and the synthesizer's own when it is ``StageTimed``)
    are spans of the period.

    Args:
        backbone: hears the microphone, emits speech tokens (its period and rate are the model's).
        synthesizer: turns token windows into PCM under an arm.
        windower: the decoder's call pattern (from the declaration).
        output_rate: the synthesizer's sample rate (from the declaration).
    """

    def __init__(
        self,
        backbone: Backbone,
        synthesizer: Synthesizer,
        windower: TokenWindower,
        output_rate: int,
    ) -> None:
        self.backbone, self.synthesizer, self.windower = backbone, synthesizer, windower
        self.period_s, self.input_rate = backbone.period_s, backbone.input_rate
        self.output_rate = output_rate
        self._span: SpanFactory = untimed

    @property
    def arm(self) -> Arm:
        return self.synthesizer.arm

    def set_arm(self, arm: Arm) -> None:
        self.synthesizer.set_arm(arm)

    @property
    def in_turn(self) -> bool:
        return self.windower.in_turn

    def reset(self) -> None:
        """A fresh conversation: backbone, windower and synthesizer back to their start."""
        self.backbone.reset()
        self.windower.reset()
        self.synthesizer.reset()

    def set_stage_timer(self, span: SpanFactory | None) -> None:
        self._span = span or untimed
        for part in (self.backbone, self.synthesizer):
            if isinstance(part, StageTimed):
                part.set_stage_timer(span)

    def step(self, mic: np.ndarray) -> PeriodStep:
        span = self._span
        with span("backbone"):
            decision = self.backbone.step(mic)
        calls = self.windower.push(decision.tokens, decision.turn_end)
        audio: list[Tensor] = []
        with torch.no_grad():
            for call in calls:
                with span("synthesis"):
                    audio.append(self.synthesizer.push(call.tokens, call.last_chunk))
                if call.last_chunk:
                    self.synthesizer.reset()
        return PeriodStep(
            phase=decision.phase,
            audio=audio,
            voice_prob=decision.voice_prob,
            turn_end=decision.turn_end,
            barge_in=decision.barge_in,
            text=decision.text,
            calls=tuple(call.info for call in calls),
            facts={"tokens": int(decision.tokens.shape[1])},
        )

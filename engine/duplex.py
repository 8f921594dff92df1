"""The full-duplex loop: one native period of microphone in, one period of speech out.

A model family hands the loop a :class:`PeriodModel`: it hears one native period of microphone
audio and answers with the speech it made in that period (any length, maybe none), what it
decided (listen or speak, turn end, barge-in), the text it said, if it has text, and what it
heard the user say, if it runs a recognizer (``heard``). Every period
:meth:`DuplexLoop.step`:

1. applies an arm switch requested since the last period (any thread may request one);
2. opens the period's cadence clock (``Metrics.begin_period``);
3. steps the model (its own spans inside: ``backbone``, ``synthesis``, ``lm``, ...);
4. closes the period (``Metrics.end_period`` with the replay engine's counters and events) and
   appends it to the trace, durable before ``step`` returns.

Two period models exist: :class:`~engine.windowed.WindowedSynthesis` (a backbone emits speech
tokens, a windower cuts them into decoder calls, a synthesizer turns calls into PCM: the
Token2Wav families) and a family's own (Moshi: one codec frame in, one out).

Playback: a period's ``pcm`` is always exactly one period of samples (``period_s ·
output_rate``), taken from a playout queue (:class:`~engine.playout.Playout`) the model's audio
fills, with silence where the queue runs short (listening, or a turn's short last call). So a
sink fed one period per period stays continuous and the output stays aligned with the input
(period ``k`` of the output WAV is what the assistant said in answer to periods ``0..k`` of the
input); ``loop.queued_samples`` in the trace shows it if a model outpaces its period.

Threads: ``step`` and ``reset`` on the engine thread only (it owns every CUDA call);
``request_arm`` from any thread. Nothing here knows a model family, Qt or an audio device.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from engine.arms import Arm
from engine.metrics import Metrics, PeriodRecord
from engine.playout import Playout
from engine.replay import ReplayEngine
from engine.trace import TraceWriter
from engine.windows import CallInfo

__all__ = [
    "CallInfo",
    "DuplexLoop",
    "PeriodModel",
    "PeriodOutcome",
    "PeriodStep",
    "Phase",
    "SpanFactory",
    "StageTimed",
    "untimed",
]

SpanFactory = Callable[[str], AbstractContextManager[None]]


def untimed(name: str) -> AbstractContextManager[None]:
    """The stage timer of a model nobody times (``span or untimed``): every span is nothing."""
    return nullcontext()


class Phase(StrEnum):
    """What the assistant did in a period."""

    LISTEN = "listen"
    SPEAK = "speak"


@dataclass(frozen=True)
class PeriodStep:
    """What a period model did with one period of microphone audio."""

    phase: Phase
    audio: Sequence[Tensor]  # PCM made this period, in order, float at the output rate
    voice_prob: float = 0.0  # the user's voice-activity probability for the UI, 0..1
    turn_end: bool = False  # the assistant's turn ended in this period (natural end or barge-in)
    barge_in: bool = False  # the user interrupted the assistant (implies turn_end)
    # What the assistant said in this period, where the family has text: a continuation of its
    # running text that carries its own spacing (a word that starts here starts with a space;
    # Moshi's subword pieces do), so a transcript is the periods' texts concatenated.
    text: str = ""
    # What the user said, as the family's recognizer heard it, in the period it became known
    # (a whole utterance, no leading space; "" where the family runs no recognizer).
    heard: str = ""
    calls: tuple[CallInfo, ...] = ()  # the synthesis calls made (windowed families)
    facts: Mapping[str, Any] = field(default_factory=dict)  # more plain facts for the trace


@runtime_checkable
class StageTimed(Protocol):
    """A model (or a part of one) that times its stages as spans of the period: the loop hands
    it ``Metrics.span`` once (``flow``, ``vocoder``, ``lm``, ... in the trace and the panel)."""

    def set_stage_timer(self, span: SpanFactory | None) -> None: ...


class PeriodModel(Protocol):
    """One native period of a full-duplex model: hear, decide, speak; under an arm.

    A model that is also :class:`StageTimed` gets the period's span factory from the loop.
    ``set_arm`` takes effect at the next ``step`` and never changes what is computed: every
    arm's output equals eager's bit for bit.
    """

    period_s: float  # the native period (1.0 s for Token2Wav, 0.08 s for Moshi)
    input_rate: int  # microphone samples per second the model hears
    output_rate: int  # speech samples per second it makes

    @property
    def arm(self) -> Arm: ...

    def set_arm(self, arm: Arm) -> None: ...

    @property
    def in_turn(self) -> bool:
        """True while an answer is under way (its audio not all made yet)."""
        ...

    def step(self, mic: np.ndarray) -> PeriodStep:
        """``mic``: float32 mono, ``period_s · input_rate`` samples."""
        ...

    def reset(self) -> None:
        """Back to a fresh conversation, in place."""
        ...


@dataclass(frozen=True)
class PeriodOutcome:
    """One period's result: audio to play and what happened, for the sink and the UI."""

    pcm: np.ndarray  # float32 mono at the model's output rate, exactly one period
    record: PeriodRecord  # the engine.metrics record (also written to the trace)
    phase: Phase
    voice_prob: float
    calls: tuple[CallInfo, ...]
    text: str = ""  # what the assistant said in this period ("" where the family has no text)
    heard: str = ""  # what the user said, as the family's recognizer heard it ("" where none)


class DuplexLoop:
    """Runs one native period at a time; see the module docstring for the order of work.

    Args:
        model: the family's period model (hears the microphone, makes speech).
        metrics: cadence clock; its ``period_s`` must be the model's.
        replay: the replay engine whose counters and events each period records (None: none).
        trace: where each period is appended (None: not written).
        period_facts: more facts for each period's ``record.loop``, given the arm that ran it
            (e.g. audit counts), merged in before the record is written.
    """

    def __init__(
        self,
        model: PeriodModel,
        metrics: Metrics,
        replay: ReplayEngine | None,
        trace: TraceWriter | None,
        period_facts: Callable[[Arm], Mapping[str, Any]] | None = None,
    ) -> None:
        if abs(metrics.period_s - model.period_s) > 1e-9:
            raise ValueError(
                f"metrics period {metrics.period_s} s != model period {model.period_s} s: "
                "build Metrics(period_s=model.period_s)"
            )
        self.model, self.metrics, self.replay, self.trace = model, metrics, replay, trace
        self.period_facts = period_facts
        self.input_samples = round(model.period_s * model.input_rate)
        self.output_samples = round(model.period_s * model.output_rate)
        self._playout = Playout()
        self._lock = threading.Lock()
        self._requested: Arm | None = None
        if isinstance(model, StageTimed):
            model.set_stage_timer(metrics.span)

    @property
    def arm(self) -> Arm:
        """The arm the model runs now (a requested switch applies at the next period)."""
        return self.model.arm

    @property
    def in_turn(self) -> bool:
        """True while an answer is under way or still queued for playback."""
        return self.model.in_turn or self._playout.queued > 0

    def request_arm(self, arm: Arm) -> None:
        """Switch to ``arm`` at the next period's start; safe from any thread."""
        with self._lock:
            self._requested = Arm(arm)

    def reset(self) -> None:
        """Back to a fresh conversation: the model reset in place, playout emptied."""
        self.model.reset()
        self._playout.clear()

    def step(self, mic: np.ndarray) -> PeriodOutcome:
        """One native period: hear ``mic`` (float32 mono, one period at the input rate)."""
        if mic.shape != (self.input_samples,):
            raise ValueError(
                f"mic has shape {mic.shape}; pass one period of mono audio: "
                f"({self.input_samples},) float32 samples at {self.model.input_rate} Hz"
            )
        self._apply_requested_arm()
        replay = self.replay
        self.metrics.begin_period(replay=replay.snapshot() if replay is not None else None)
        step = self.model.step(mic.astype(np.float32, copy=False))
        for pcm in step.audio:
            self._playout.push(pcm.detach().reshape(-1).to(torch.float32).cpu().numpy())
        out = self._playout.period(self.output_samples)
        record = self.metrics.end_period(
            replay=replay.snapshot() if replay is not None else None,
            events=replay.drain_events() if replay is not None else (),
        )
        record.loop = self._loop_facts(step, out)
        if self.period_facts is not None:
            record.loop.update(self.period_facts(self.model.arm))
        if self.trace is not None:
            self.trace.write(record)
        return PeriodOutcome(
            out, record, step.phase, step.voice_prob, step.calls, step.text, step.heard
        )

    # -- internals ---------------------------------------------------------------------------

    def _apply_requested_arm(self) -> None:
        with self._lock:
            arm, self._requested = self._requested, None
        if arm is not None and arm != self.model.arm:
            self.model.set_arm(arm)
            self.metrics.set_arm(str(arm), reason="requested")

    def _loop_facts(self, step: PeriodStep, out: np.ndarray) -> dict[str, Any]:
        """The period's conversation facts for the trace (plain JSON values)."""
        facts: dict[str, Any] = {
            "phase": str(step.phase),
            "voice_prob": round(float(step.voice_prob), 4),
            **step.facts,
            "turn_end": bool(step.turn_end),
            "barge_in": bool(step.barge_in),
            "calls": [c.to_dict() for c in step.calls],
        }
        if step.text:
            facts["text"] = step.text
        if step.heard:
            facts["heard"] = step.heard
        facts["queued_samples"] = self._playout.queued
        facts["out_peak"] = round(float(np.abs(out).max(initial=0.0)), 6)
        return facts

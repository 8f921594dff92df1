"""The full-duplex loop: one native period of microphone in, one period of speech out.

Every period (1 s for the Token2Wav family) :meth:`DuplexLoop.step`:

1. applies an arm switch requested since the last period (any thread may request one);
2. opens the period's cadence clock (``Metrics.begin_period``);
3. lets the backbone hear the period's microphone audio and decide: listen, or speak and emit
   speech tokens (span ``backbone``);
4. cuts the tokens into the decoder's calls (:class:`~engine.windows.TokenWindower`: flush at a
   turn's start, steady windows, ``last_chunk`` at its end) and pushes each through the
   synthesizer under the current arm (span ``synthesis``; a synthesizer with stage timing adds
   ``flow`` and ``vocoder`` inside), resetting it to the prompt-only state after a last call;
5. closes the period (``Metrics.end_period`` with the replay engine's counters and events) and
   appends it to the trace, durable before ``step`` returns.

Playback: a period's ``pcm`` is always exactly one period of samples (``period_s ·
output_rate``), taken from a playout queue the calls fill, with silence where the queue runs
short (listening, or a turn's short last call). So a sink fed one period per period stays
continuous and the output stays aligned with the input (period ``k`` of the output WAV is what
the assistant said in answer to periods ``0..k`` of the input). MiniCPM-o's pattern fills exactly
one period per speaking period (a 28-token flush or steady window is 50 frames = 1 s), so the
queue does not grow; ``loop.queued_samples`` in the trace shows it if a backbone outpaces it.
Windows that do not divide the period (Lychee-FD: 20-frame calls, 2 or 3 per period) leave a
short silence in a turn's first period and then run one call behind; no audio is dropped.

Threads: ``step`` and ``reset`` on the engine thread only (it owns every CUDA call);
``request_arm`` from any thread. Nothing here knows a model family, Qt or an audio device.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from engine.arms import Arm
from engine.metrics import Metrics, PeriodRecord
from engine.replay import ReplayEngine
from engine.trace import TraceWriter
from engine.windows import CallInfo, TokenWindower

__all__ = [
    "Backbone",
    "BackboneStep",
    "CallInfo",
    "DuplexLoop",
    "PeriodOutcome",
    "Phase",
    "StageTimed",
    "Synthesizer",
]


class Phase(StrEnum):
    """What the assistant did in a period."""

    LISTEN = "listen"
    SPEAK = "speak"


@dataclass(frozen=True)
class BackboneStep:
    """A backbone's decision for one period."""

    phase: Phase  # what the assistant did this period
    tokens: Tensor  # (1, n) int32 speech tokens emitted this period, n >= 0, on the synth device
    turn_end: bool  # the assistant's turn ended during this period (natural end or barge-in)
    barge_in: bool  # the user interrupted the assistant (implies turn_end)
    voice_prob: float  # user voice-activity probability for the UI, 0..1


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


SpanFactory = Callable[[str], AbstractContextManager[None]]


@runtime_checkable
class StageTimed(Protocol):
    """A synthesizer that can time its stages (``flow``, ``vocoder``) as spans of the period."""

    def set_stage_timer(self, span: SpanFactory | None) -> None: ...


@dataclass(frozen=True)
class PeriodOutcome:
    """One period's result: audio to play and what happened, for the sink and the UI."""

    pcm: np.ndarray  # float32 mono at the synthesizer's output rate, exactly one period
    record: PeriodRecord  # the engine.metrics record (also written to the trace)
    phase: Phase
    voice_prob: float
    calls: tuple[CallInfo, ...]


class DuplexLoop:
    """Runs one native period at a time; see the module docstring for the order of work.

    Args:
        backbone: hears the microphone, emits speech tokens.
        synthesizer: turns token windows into PCM under an arm.
        windower: the decoder's call pattern (from the declaration).
        metrics: cadence clock; its ``period_s`` must be the backbone's.
        engine: the replay engine whose counters and events each period records (None: none).
        trace: where each period is appended (None: not written).
        output_rate: the synthesizer's sample rate (24 kHz for Token2Wav).
        period_facts: more facts for each period's ``record.loop``, given the arm that ran it
            (e.g. audit counts), merged in before the record is written.
    """

    def __init__(
        self,
        backbone: Backbone,
        synthesizer: Synthesizer,
        windower: TokenWindower,
        metrics: Metrics,
        engine: ReplayEngine | None,
        trace: TraceWriter | None,
        output_rate: int,
        period_facts: Callable[[Arm], Mapping[str, Any]] | None = None,
    ) -> None:
        if abs(metrics.period_s - backbone.period_s) > 1e-9:
            raise ValueError(
                f"metrics period {metrics.period_s} s != backbone period {backbone.period_s} s: "
                "build Metrics(period_s=backbone.period_s)"
            )
        self.backbone, self.synthesizer, self.windower = backbone, synthesizer, windower
        self.metrics, self.engine, self.trace = metrics, engine, trace
        self.output_rate, self.period_facts = output_rate, period_facts
        self.input_samples = round(backbone.period_s * backbone.input_rate)
        self.output_samples = round(backbone.period_s * output_rate)
        self._playout: deque[np.ndarray] = deque()
        self._queued = 0
        self._lock = threading.Lock()
        self._requested: Arm | None = None
        if isinstance(synthesizer, StageTimed):
            synthesizer.set_stage_timer(metrics.span)

    @property
    def arm(self) -> Arm:
        """The arm the synthesizer runs now (a requested switch applies at the next period)."""
        return self.synthesizer.arm

    def request_arm(self, arm: Arm) -> None:
        """Switch to ``arm`` at the next period's start; safe from any thread."""
        with self._lock:
            self._requested = Arm(arm)

    def reset(self) -> None:
        """Back to a fresh conversation: backbone, windower, synthesizer and playout emptied."""
        self.backbone.reset()
        self.windower.reset()
        self.synthesizer.reset()
        self._playout.clear()
        self._queued = 0

    def step(self, mic: np.ndarray) -> PeriodOutcome:
        """One native period: hear ``mic`` (float32 mono, one period at the input rate)."""
        if mic.shape != (self.input_samples,):
            raise ValueError(
                f"mic has shape {mic.shape}; pass one period of mono audio: "
                f"({self.input_samples},) float32 samples at {self.backbone.input_rate} Hz"
            )
        self._apply_requested_arm()
        engine = self.engine
        self.metrics.begin_period(replay=engine.snapshot() if engine is not None else None)
        with self.metrics.span("backbone"):
            decision = self.backbone.step(mic.astype(np.float32, copy=False))
        calls = self.windower.push(decision.tokens, decision.turn_end)
        with torch.no_grad():
            for call in calls:
                with self.metrics.span("synthesis"):
                    pcm = self.synthesizer.push(call.tokens, call.last_chunk)
                self._queue(pcm)
                if call.last_chunk:
                    self.synthesizer.reset()
        out = self._play()
        record = self.metrics.end_period(
            replay=engine.snapshot() if engine is not None else None,
            events=engine.drain_events() if engine is not None else (),
        )
        infos = tuple(call.info for call in calls)
        record.loop = self._loop_facts(decision, infos, out)
        if self.period_facts is not None:
            record.loop.update(self.period_facts(self.synthesizer.arm))
        if self.trace is not None:
            self.trace.write(record)
        return PeriodOutcome(out, record, decision.phase, decision.voice_prob, infos)

    # -- internals ---------------------------------------------------------------------------

    def _apply_requested_arm(self) -> None:
        with self._lock:
            arm, self._requested = self._requested, None
        if arm is not None and arm != self.synthesizer.arm:
            self.synthesizer.set_arm(arm)
            self.metrics.set_arm(str(arm), reason="requested")

    def _queue(self, pcm: Tensor) -> None:
        samples = pcm.detach().reshape(-1).to(torch.float32).cpu().numpy()
        if samples.size:
            self._playout.append(samples)
            self._queued += samples.size

    def _play(self) -> np.ndarray:
        """Exactly one period from the playout queue, silence where it runs short."""
        out = np.zeros(self.output_samples, dtype=np.float32)
        filled = 0
        while filled < self.output_samples and self._playout:
            head = self._playout[0]
            n = min(head.size, self.output_samples - filled)
            out[filled : filled + n] = head[:n]
            filled += n
            if n == head.size:
                self._playout.popleft()
            else:
                self._playout[0] = head[n:]
        self._queued -= filled
        return out

    def _loop_facts(
        self, decision: BackboneStep, calls: tuple[CallInfo, ...], out: np.ndarray
    ) -> dict[str, Any]:
        """The period's conversation facts for the trace (plain JSON values)."""
        return {
            "phase": str(decision.phase),
            "voice_prob": round(float(decision.voice_prob), 4),
            "tokens": int(decision.tokens.shape[1]),
            "turn_end": bool(decision.turn_end),
            "barge_in": bool(decision.barge_in),
            "calls": [c.to_dict() for c in calls],
            "queued_samples": self._queued,
            "out_peak": round(float(np.abs(out).max(initial=0.0)), 6),
        }

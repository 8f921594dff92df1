"""One set of Token2Wav bindings per multiplexer lane and voice, each session owning its state.

The paper's other way to hold N sessions (§2.2): one set of bindings, each session's state
brought to them. A :class:`LaneSpeech` is one decoder stream (flow and vocoder operators, their
replay engine and graphs, a working carry, conv region and vocoder tails at the addresses the
graphs alias) captured once, by the first session of its voice on its lane. A
:class:`SharedSession` owns only its declared state (:class:`SessionState`: its carry buffer and
extent, its conv region, its conformer caches, its vocoder tails, its arm) and its windower; its
period copies that state in (:meth:`LaneSpeech.period`), runs on the lane's stream, and copies
it out, all on the lane's CUDA stream: 2 x the carry (572.5 MiB at full size) per 1-s period,
~0.6 ms of HBM time on an H200. A later session of a known voice on a lane captures nothing: it
allocates its state (the carry and the conv region; the conformer and the tails start as the
voice's prompt-only ones) and writes the reset state into it.

**Voices: bindings per (lane, voice).** A binding bakes in one voice: its prompt length is in
every signature (the carry's extents count the prompt's frames) and its x-vector and prompt-only
state are read by the replayed operators (closures over the voice's tensors, as the state
rule's reset base). Keying by voice keeps those constants where the graphs read them, with no
copy; the alternative (the x-vector and the reset base as copied-in state, one binding per
prompt length) would add a copy of the prompt-only state to every reset for ~4 KB of x-vector
and save only the captures of a voice's first session per lane. A deployment with V voices on
L lanes captures at most L x V bindings; ``bench/capacity.py`` speaks 4 voices on 8 lanes, one
voice per lane (8 bindings for 48 sessions).

**Randomness.** The vocoder draws device randomness in every call. The bindings' graphs are
captured under the lane's own graph-safe generator state (:class:`engine.multiplex.BindingRng`);
each period hands the session's seed and Philox offset into it and reads the offset back, so a
session draws exactly what it would alone (on the CPU the vocoder's draws are host randomness,
its classes run eagerly under the session's own state).

**In a conversation** (``duplexcadence converse --sessions N``, :meth:`Token2WavSessions.
open_multiplexed`): :class:`SharedSynthesis` is the session's period model, the windowed
synthesis whose synthesizer (:class:`SharedSynthesizer`) is the session on its lane's bindings.
A period's calls run in one span of the session on the lane: its state is copied in at the
period's first call and out after its last (a listening period, with no call, copies nothing);
between periods its arm and a reset are the session's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import Tensor

from adapters.token2wav.speech import SpeechStream
from adapters.token2wav.speech_model import SpeechModel
from adapters.token2wav.states import RuleValue
from adapters.token2wav.vocoder_stream import VocoderState
from engine.arms import Arm
from engine.duplex import PeriodStep, SpanFactory
from engine.multiplex import BindingRng, SessionRng
from engine.windowed import Backbone, WindowedSynthesis
from engine.windows import TokenWindower

__all__ = ["LaneSpeech", "SessionState", "SharedSession", "SharedSynthesis", "SharedSynthesizer"]


@dataclass(eq=False)
class SessionState:
    """All a session owns of the decoder's state on shared bindings: the state rule's regions
    (by value), the vocoder's tails (fresh tensors per call, by reference) and its arm."""

    rule: RuleValue
    vocoder: VocoderState
    arm: Arm

    def tensors(self) -> list[Tensor]:
        return [
            self.rule.carry.buffer,
            self.rule.cnn,
            *self.rule.conformer.values(),
            self.vocoder.mel,
            self.vocoder.source,
            self.vocoder.speech,
        ]


class LaneSpeech:
    """One lane's bindings for one voice: the decoder stream its sessions' periods run on."""

    def __init__(self, model: SpeechModel, rng: BindingRng) -> None:
        self.model, self.rng = model, rng
        self.stream: SpeechStream = model.speech
        self.sessions = 0
        self.loads = 0  # periods served (each one copy in, one copy out)
        # What the stream holds between periods: empty tails (never another session's tensors).
        n_mels = self.stream.hift.config.in_channels
        self._empty = VocoderState.initial(n_mels, self.stream.device)

    def initial(self, arm: Arm) -> SessionState:
        """A new session's state at the reset state (allocated now: its carry and conv
        region), under ``arm`` (a state-rule arm)."""
        if not arm.state_rule:
            raise ValueError(
                f"arm {arm} runs the stock path: a session on shared bindings runs S, SR or SRc"
            )
        return SessionState(self.stream.flow.rule.initial_value(), self._empty, arm)

    def owned_bytes(self, state: SessionState) -> int:
        """Bytes of the tensors ``state`` holds that no other holder shares (the voice's
        prompt-only conformer, read by every session of the voice, is not counted)."""
        shared = {
            t.untyped_storage().data_ptr() for t in self.stream.flow.rule.prompt_conformer.values()
        }
        seen: set[int] = set()
        total = 0
        for t in state.tensors():
            ptr = t.untyped_storage().data_ptr()
            if t.numel() == 0 or ptr in shared or ptr in seen:
                continue
            seen.add(ptr)
            total += t.untyped_storage().nbytes()
        return total

    @contextmanager
    def period(self, state: SessionState, rng: SessionRng) -> Iterator[SpeechStream]:
        """The lane's stream with ``state`` copied in and ``rng``'s stream handed to the
        bindings' generator; ``state`` is copied out after (also when the period raised)."""
        stream, flow = self.stream, self.stream.flow
        with self.rng.serving(rng):
            flow.rule.load_value(state.rule)
            stream.state = state.vocoder
            stream.set_arm(state.arm)
            self.loads += 1
            # An arm that does not replay runs its flow and vocoder eagerly outside the engine:
            # on CUDA they draw from the bindings' state, installed for the whole period.
            eager = self.rng.cuda and not state.arm.replay
            try:
                with self.rng.eager() if eager else nullcontext():
                    yield stream
            finally:
                flow.rule.save_value(state.rule)
                state.vocoder, state.arm = stream.state, stream.arm
                stream.state = self._empty


class SharedSession:
    """One session on a lane's shared bindings: its own state, windower and random stream."""

    def __init__(
        self,
        lane: LaneSpeech,
        rng: SessionRng,
        arm: Arm,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.lane, self.rng = lane, rng
        self.state = lane.initial(arm)
        self.windower = TokenWindower.from_declaration(lane.model.declaration)
        self._release = release
        lane.sessions += 1

    @property
    def model(self) -> SpeechModel:
        return self.lane.model

    def period(self) -> Any:
        """``with session.period() as speech:`` the session's calls of one period."""
        return self.lane.period(self.state, self.rng)

    def owned_bytes(self) -> int:
        return self.lane.owned_bytes(self.state)

    def close(self) -> None:
        """Its state freed; the lane's bindings go with the last session on them."""
        self.lane.sessions -= 1
        self.state = None  # type: ignore[assignment]
        if self._release is not None:
            self._release()
            self._release = None


class SharedSynthesizer:
    """A session on shared bindings as the windowed synthesis' synthesizer
    (``engine.windowed.Synthesizer``): its calls run on the lane's stream, the session's state
    copied in for the span :meth:`held` (or the call alone) and out after; its arm between
    periods is the session's own."""

    def __init__(self, session: SharedSession) -> None:
        self.session = session
        self._span: SpanFactory | None = None
        self._stack: ExitStack | None = None  # the span held, while it is
        self._speech: SpeechStream | None = None  # the lane's stream, once the state is in

    @property
    def arm(self) -> Arm:
        return self._speech.arm if self._speech is not None else self.session.state.arm

    def set_arm(self, arm: Arm) -> None:
        """Takes effect at the next call; a state-rule arm only (the session keeps no stock
        state)."""
        if not arm.state_rule:
            raise ValueError(
                f"arm {arm} runs the stock path: a session on shared bindings runs S, SR or SRc"
            )
        if self._speech is not None:
            self._speech.set_arm(arm)
        else:
            self.session.state.arm = arm

    def set_stage_timer(self, span: SpanFactory | None) -> None:
        """The session's stage timer, given to the lane's stream for the session's spans."""
        self._span = span

    @contextmanager
    def held(self) -> Iterator[None]:
        """One span of the session on the lane (a period): its state copied in at the first
        call inside and out at the end; re-entrant (a call inside runs in the span)."""
        if self._stack is not None:
            yield
            return
        with ExitStack() as stack:
            self._stack = stack
            try:
                yield
            finally:
                self._stack = None
                if self._speech is not None:
                    self._speech.set_stage_timer(None)
                    self._speech = None

    def _stream(self) -> SpeechStream:
        if self._speech is None:
            assert self._stack is not None, "a call runs inside held()"
            self._speech = self._stack.enter_context(self.session.period())
            self._speech.set_stage_timer(self._span)
        return self._speech

    def push(self, tokens: Tensor, last_chunk: bool = False) -> Tensor:
        with self.held():
            return self._stream().push(tokens, last_chunk)

    def reset(self) -> None:
        """Turn reset: the session's state back to the prompt-only state (in a span: by the
        stream's own reset, as the session alone resets)."""
        with self.held():
            self._stream().reset()


class SharedSynthesis(WindowedSynthesis):
    """The windowed synthesis of a session on shared bindings: its own backbone and windower,
    its calls of each period in one span on the lane (:class:`SharedSynthesizer`)."""

    def __init__(self, backbone: Backbone, session: SharedSession, output_rate: int) -> None:
        self.shared = SharedSynthesizer(session)
        super().__init__(backbone, self.shared, session.windower, output_rate)

    def step(self, mic: np.ndarray) -> PeriodStep:
        with self.shared.held():
            return super().step(mic)

"""Many Token2Wav sessions on one set of weights (``adapters.face.SessionSource``).

The flow and the vocoder are loaded once (:meth:`Token2WavFamily.load_sessions`); each session
gets its own voice (the request's recording, or a random voice seeded by the session), its own
binding at that voice's prompt length, its own replay engine and streams (carry, conv region,
vocoder tails), warmed up and sealed, and its own synthetic backbone. Nothing a session writes
is shared: the flow's only mutable buffers are the stock cache envelope, which the state-rule
arms never touch: a session opened here runs S, SR or SRc (one loaded with the envelope may
still be built alone under a stock arm with :meth:`Token2WavSessions.speech`).

:meth:`Token2WavSessions.open_shared` is the other way (``adapters.token2wav.shared``): one set
of bindings per (multiplexer lane, voice), captured by its first session; each session owns
only its state, copied in and out around its period; a later session captures nothing.
It is how this family's sessions run in one process (:meth:`Token2WavSessions.open_multiplexed`,
``duplexcadence converse --sessions N``): ``bindings`` = ``"shared"``.
"""

from __future__ import annotations

import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import torch

from adapters.face import EagerGuard, FamilyError, LoadedModel, ModelRequest, Progress
from adapters.token2wav.binding import FlowBinding, bind_flow
from adapters.token2wav.prompt import VoicePrompt
from adapters.token2wav.shared import LaneSpeech, SharedSession
from adapters.token2wav.speech import SpeechStream
from adapters.token2wav.speech_model import SpeechModel
from adapters.token2wav.states import PromptState
from adapters.token2wav.stream import FlowStream
from adapters.turns.vad import RATE
from engine.arms import Arm
from engine.contract import Declaration
from engine.graph_lane import GraphLane, current_lane
from engine.multiplex import BindingRng, SessionRng
from engine.replay import ReplayEngine
from engine.windows import TokenWindower

if TYPE_CHECKING:
    from adapters.token2wav.presets import ModelPreset

__all__ = ["Face", "Token2WavSessions", "check_agrees", "voice_for"]


class Face(Protocol):
    """What a session needs of the Token2Wav face (``adapters.token2wav.family``)."""

    @property
    def title(self) -> str: ...

    @property
    def declaration(self) -> str: ...

    def warm_up(
        self, speech: SpeechModel, request: ModelRequest, progress: Progress, audit: Any
    ) -> dict[str, Any]: ...

    def loaded(
        self,
        speech: SpeechModel,
        request: ModelRequest,
        warmup: dict[str, Any],
        audit: Any,
        shared: SharedSession | None = None,
    ) -> LoadedModel: ...


def _quiet(stage: str, fraction: float) -> None:
    """A session's warm-up reports nothing: the multiplexer's caller reports sessions."""


class Token2WavSessions:
    """The decoder's weights for ``request``; :meth:`open` makes a session on them."""

    def __init__(
        self,
        face: Face,
        request: ModelRequest,
        flow: Any,
        hift: Any,
        declaration: Declaration,
        size: ModelPreset,
    ) -> None:
        self.face, self.request, self.flow, self.hift = face, request, flow, hift
        self.declaration, self.size = declaration, size
        values = declaration.values()
        token_rate = declaration.clock_rate("token", values)
        self.period_s = values["period_tokens"] / token_rate
        self.output_rate = int(hift.config.sampling_rate)
        self.input_rate = RATE  # the synthetic backbone's voice-activity model
        weights = "checkpoint" if request.checkpoint is not None else "seeded random weights"
        self.title = f"{face.title} ({size.name}, {weights})"
        self.bindings = "shared"  # open_multiplexed: one set per (lane, voice)
        self._bindings: dict[tuple[int, int], FlowBinding] = {}
        # Held while a session speaks with them (weakly here): voices and their prompt states.
        self._voices: weakref.WeakValueDictionary[int | None, VoicePrompt] = (
            weakref.WeakValueDictionary()
        )
        self._prompts: weakref.WeakValueDictionary[int | None, PromptState] = (
            weakref.WeakValueDictionary()
        )
        self._kept: dict[int, VoicePrompt] = {}  # a live prompt state's voice
        # One set of bindings per (multiplexer lane, voice), while a session runs on it.
        self._shared: dict[tuple[GraphLane | None, int | None], LaneSpeech] = {}

    def state_bytes(self, arm: Arm) -> int:
        """One session's state under ``arm``: the declaration's plan at the request's voice."""
        from engine.plan import make_plan

        return (
            make_plan(self.declaration, {"f_prompt": self.request.voice_frames})
            .price(arm)
            .total_bytes
        )

    def speech(
        self,
        voice: VoicePrompt,
        arm: Arm,
        eager_guard: EagerGuard | None = None,
        *,
        prompt: PromptState | None = None,
    ) -> SpeechModel:
        """The decoder's streams for ``voice`` under ``arm``: binding, engine, catalog. With
        ``prompt`` (the voice's shared prompt-only state) the stream runs the state rule only
        and keeps no stock state."""
        request = self.request
        binding = self.binding(voice.frames)
        check_agrees(self.flow, self.hift, binding, self.face.declaration)
        # Every operator of the stream (flow chunk and step, vocoder) writes only tensors made
        # with the stream and is the same code over the shared weights in every session: on a
        # multiplexer lane, a class another session probed there captures at its first sight.
        replay = ReplayEngine(request.device, eager_guard=eager_guard, lane_probe=True)
        flow_stream = FlowStream(
            self.flow, voice.tokens, voice.mel, voice.spk,
            binding=binding, arm=arm, replay=replay,
            stock_arms=prompt is None, prompt=prompt,
        )  # fmt: skip
        return SpeechModel(
            speech=SpeechStream(flow_stream, self.hift, replay),
            windower=TokenWindower.from_declaration(self.declaration),
            replay=replay,
            voice=voice,
            declaration=self.declaration,
            binding=binding,
            size=self.size,
        )

    def binding(self, frames: int) -> FlowBinding:
        """The flow's binding at a prompt of ``frames``: made once per prompt length (the plan
        is the same for every voice of that length; ~1 s of host time to derive)."""
        n_steps = self.request.n_steps or self.size.n_steps
        key = (frames, n_steps)
        if key not in self._bindings:
            self._bindings[key] = bind_flow(self.declaration, frames, n_steps)
        return self._bindings[key]

    def voice(self, seed: int) -> VoicePrompt:
        """A session's voice: the request's recording, else a random voice seeded by ``seed``;
        one object per voice while anything holds it."""
        key = self._voice_key(seed)
        voice = self._voices.get(key)
        if voice is None:
            voice = voice_for(replace(self.request, seed=seed), self.face.declaration)
            self._voices[key] = voice
        return voice

    def prompt_state(self, seed: int) -> tuple[VoicePrompt, PromptState]:
        """The voice seeded by ``seed`` and its prompt-only state under the state rule: made
        once, shared by every session speaking with that voice while one does (no session
        writes it; each holds it, and the voice lives as long as its state)."""
        key = self._voice_key(seed)
        state = self._prompts.get(key)
        if state is not None:
            return self._kept[id(state)], state
        voice = self.voice(seed)
        binding = self.binding(voice.frames)
        state = PromptState.build(self.flow, voice.tokens, voice.mel, voice.spk, binding, None)
        self._prompts[key] = state
        self._kept[id(state)] = voice
        weakref.finalize(state, self._kept.pop, id(state), None)
        return voice, state

    def voices_held(self) -> int:
        """Voices whose prompt-only state a live session holds."""
        return len(self._prompts)

    def _voice_key(self, seed: int) -> int | None:
        return None if self.request.voice is not None else seed

    def open_speech(
        self,
        seed: int,
        arm: Arm,
        eager_guard: EagerGuard | None = None,
        voice: int | None = None,
    ) -> tuple[SpeechModel, dict[str, Any]]:
        """A session's decoder alone, warmed up and sealed; with what the warm-up did. Call it
        with the session's generator state installed. Its voice is the one seeded by ``voice``
        (default: ``seed``), its prompt-only state shared with the other sessions of that voice;
        it runs the state rule only and keeps no stock state."""
        if not arm.state_rule:
            raise FamilyError(
                f"arm {arm} runs the stock path, whose cache envelope is one per process: "
                "a session among many runs S, SR or SRc",
                "arm",
            )
        request = replace(self.request, seed=seed, arm=arm)
        prompt, state = self.prompt_state(seed if voice is None else voice)
        speech = self.speech(prompt, arm, eager_guard, prompt=state)
        warmup = self.face.warm_up(speech, request, _quiet, None)
        return speech, warmup

    def open_shared(
        self, seed: int, arm: Arm, rng: SessionRng, voice: int | None = None
    ) -> tuple[SharedSession, dict[str, Any]]:
        """A session on its lane's bindings for its voice (``adapters.token2wav.shared``); with
        what its opening did. The first session of a voice on a lane (the lane is the one the
        multiplexer opens it on, :func:`engine.graph_lane.current_lane`) makes the bindings:
        warm-up and captures under the bindings' own generator state, serving ``rng``; a later
        one captures nothing (``steps`` 0): it allocates its state and writes the reset state
        into it. Its stream starts from its seed either way. Call it with no period running
        (the multiplexer's ``admit``)."""
        if not arm.state_rule:
            raise FamilyError(
                f"arm {arm} runs the stock path: a session on shared bindings runs S, SR or SRc",
                "arm",
            )
        key = (current_lane(), self._voice_key(seed if voice is None else voice))
        lane = self._shared.get(key)
        info: dict[str, Any] = {"bindings": "shared"}
        if lane is None:
            binding_rng = BindingRng(torch.device(self.request.device), rng.lock)
            prompt, state = self.prompt_state(seed if voice is None else voice)
            model = self.speech(prompt, arm, binding_rng.eager, prompt=state)
            request = replace(self.request, seed=seed, arm=arm)
            with binding_rng.serving(rng):
                info |= self.face.warm_up(model, request, _quiet, None)
            lane = self._shared[key] = LaneSpeech(model, binding_rng)
            info["bindings"] = "captured"
        else:
            info |= {"steps": 0, "eager_warmups": 0, "lane_probes": 0, "captures": 0}
        rng.reseed()  # the conversation's draws do not depend on the warm-up

        def release(lane: LaneSpeech = lane) -> None:
            if lane.sessions == 0 and self._shared.get(key) is lane:
                del self._shared[key]

        return SharedSession(lane, rng, arm, release), info

    def shared_bindings(self) -> int:
        """Sets of bindings (lane, voice) a live session runs on."""
        return len(self._shared)

    def open(self, seed: int, arm: Arm, eager_guard: EagerGuard | None = None) -> LoadedModel:
        """A session: its decoder (:meth:`open_speech`) under the synthetic backbone."""
        speech, warmup = self.open_speech(seed, arm, eager_guard)
        # It keeps no stock state: the arms it may switch to are the state rule's.
        request = replace(self.request, seed=seed, arm=arm, envelope=False)
        return self.face.loaded(speech, request, warmup, None)

    def open_multiplexed(
        self, seed: int, arm: Arm, rng: SessionRng, voice: int | None = None
    ) -> LoadedModel:
        """A conversation among many (``adapters.face.SessionSource``): on its lane's shared
        bindings for its voice (:meth:`open_shared`), under the synthetic backbone seeded by
        ``seed``; its warm-up record says ``bindings``: ``captured`` (it made them) or
        ``shared`` (it captured nothing). Its close frees its state (and the bindings, with
        the last session on them)."""
        session, info = self.open_shared(seed, arm, rng, voice)
        request = replace(self.request, seed=seed, arm=arm, envelope=False)
        loaded = self.face.loaded(session.model, request, info, None, shared=session)
        loaded.close = session.close
        return loaded


def check_agrees(flow: Any, hift: Any, binding: FlowBinding, declaration: str) -> None:
    """The weights' vocabulary and sample rate are the declaration's: a checkpoint for another
    tokenizer or rate would otherwise run and speak garbage."""
    vocab, rate = flow.input_embedding.num_embeddings, hift.config.sampling_rate
    if (vocab, rate) != (binding.vocab, binding.sample_rate):
        raise FamilyError(
            f"the checkpoint's flow has {vocab} speech tokens at {rate} Hz, but the {declaration} "
            f"declaration states {binding.vocab} at {binding.sample_rate} Hz: choose the "
            "checkpoint folder that belongs to this model family",
            "checkpoint",
        )


def voice_for(request: ModelRequest, declaration: str) -> VoicePrompt:
    """The recording's voice through the checkpoint's tokenizer and speaker model, else a seeded
    random voice of ``voice_frames`` prompt frames."""
    from adapters.token2wav.prompt import PromptError, random_voice, voice_from_wav

    if request.voice is None:
        return random_voice(request.voice_frames, request.seed, request.device, declaration)
    assert request.checkpoint is not None, "check() lets a voice through only with a checkpoint"
    try:
        return voice_from_wav(request.voice, request.checkpoint, request.device, declaration)
    except PromptError as error:
        raise FamilyError(str(error), "voice") from None

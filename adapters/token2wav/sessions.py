"""Many Token2Wav sessions on one set of weights (``adapters.face.SessionSource``).

The flow and the vocoder are loaded once (:meth:`Token2WavFamily.load_sessions`); each session
gets its own voice (the request's recording, or a random voice seeded by the session), its own
binding at that voice's prompt length, its own replay engine and streams (carry, conv region,
vocoder tails), warmed up and sealed, and its own synthetic backbone. Nothing a session writes
is shared: the flow's only mutable buffers are the stock cache envelope, which the state-rule
arms never touch: a session opened here runs S, SR or SRc (one loaded with the envelope may
still be built alone under a stock arm with :meth:`Token2WavSessions.speech`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from adapters.face import EagerGuard, FamilyError, LoadedModel, ModelRequest
from adapters.token2wav.binding import bind_flow
from adapters.token2wav.prompt import VoicePrompt
from adapters.token2wav.speech import SpeechStream
from adapters.token2wav.stream import FlowStream
from engine.arms import Arm
from engine.contract import Declaration
from engine.replay import ReplayEngine
from engine.windows import TokenWindower

if TYPE_CHECKING:
    from adapters.token2wav.family import SpeechModel, Token2WavFamily
    from adapters.token2wav.presets import ModelPreset

__all__ = ["Token2WavSessions"]


def _quiet(stage: str, fraction: float) -> None:
    """A session's warm-up reports nothing: the multiplexer's caller reports sessions."""


class Token2WavSessions:
    """The decoder's weights for ``request``; :meth:`open` makes a session on them."""

    def __init__(
        self,
        face: Token2WavFamily,
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
        self.input_rate = 16_000  # the synthetic backbone's voice-activity model
        weights = "checkpoint" if request.checkpoint is not None else "seeded random weights"
        self.title = f"{face.title} ({size.name}, {weights})"

    def state_bytes(self, arm: Arm) -> int:
        """One session's state under ``arm``: the declaration's plan at the request's voice."""
        from engine.plan import make_plan

        return (
            make_plan(self.declaration, {"f_prompt": self.request.voice_frames})
            .price(arm)
            .total_bytes
        )

    def speech(
        self, voice: VoicePrompt, arm: Arm, eager_guard: EagerGuard | None = None
    ) -> SpeechModel:
        """The decoder's streams for ``voice`` under ``arm``: binding, engine, catalog."""
        from adapters.token2wav.family import SpeechModel, _check_agrees

        request = self.request
        binding = bind_flow(self.declaration, voice.frames, request.n_steps or self.size.n_steps)
        _check_agrees(self.flow, self.hift, binding, self.face.declaration)
        replay = ReplayEngine(request.device, eager_guard=eager_guard)
        flow_stream = FlowStream(
            self.flow, voice.tokens, voice.mel, voice.spk,
            binding=binding, arm=arm, replay=replay,
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

    def voice(self, seed: int) -> VoicePrompt:
        """A session's voice: the request's recording, else a random voice seeded by ``seed``."""
        from adapters.token2wav.family import _voice

        return _voice(replace(self.request, seed=seed), self.face.declaration)

    def open_speech(
        self, seed: int, arm: Arm, eager_guard: EagerGuard | None = None
    ) -> tuple[SpeechModel, dict[str, Any]]:
        """A session's decoder alone (its voice from ``seed``), warmed up and sealed; with
        what the warm-up did. Call it with the session's generator state installed."""
        if not arm.state_rule:
            raise FamilyError(
                f"arm {arm} runs the stock path, whose cache envelope is one per process: "
                "a session among many runs S, SR or SRc",
                "arm",
            )
        request = replace(self.request, seed=seed, arm=arm)
        speech = self.speech(self.voice(seed), arm, eager_guard)
        warmup = self.face.warm_up(speech, request, _quiet, None)
        return speech, warmup

    def open(self, seed: int, arm: Arm, eager_guard: EagerGuard | None = None) -> LoadedModel:
        """A session: its decoder (:meth:`open_speech`) under the synthetic backbone."""
        speech, warmup = self.open_speech(seed, arm, eager_guard)
        return self.face.loaded(speech, replace(self.request, seed=seed, arm=arm), warmup, None)

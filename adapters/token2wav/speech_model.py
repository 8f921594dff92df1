"""The Token2Wav decoder alone, loaded for a request (torch-free at import: the face imports it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adapters.token2wav.binding import FlowBinding
    from adapters.token2wav.presets import ModelPreset
    from adapters.token2wav.prompt import VoicePrompt
    from adapters.token2wav.speech import SpeechStream
    from engine.contract import Declaration
    from engine.replay import ReplayEngine
    from engine.windows import TokenWindower

__all__ = ["SpeechModel"]


@dataclass
class SpeechModel:
    """The Token2Wav decoder alone, loaded for a request: what ``synth`` streams tokens through."""

    speech: SpeechStream  # tokens -> PCM under the arm
    windower: TokenWindower  # the declaration's call pattern
    replay: ReplayEngine
    voice: VoicePrompt
    declaration: Declaration
    binding: FlowBinding  # what the declaration and its plan fix at this voice's prompt length
    size: ModelPreset

    @property
    def values(self) -> Mapping[str, int]:
        """The operating point at this voice's prompt length (and the solver steps)."""
        return self.binding.values

    @property
    def output_rate(self) -> int:
        return self.binding.sample_rate

    @property
    def n_steps(self) -> int:
        return self.binding.n_steps

    @property
    def vocab(self) -> int:
        return self.binding.vocab

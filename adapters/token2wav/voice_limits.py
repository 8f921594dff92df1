"""How long a voice prompt may be, from the declaration and the tokenizer's framing (torch-free).

At least :data:`MIN_PROMPT_S`; at most :func:`prompt_limits`'s ``max_frames`` mel frames, because
the stock path's attention envelope (the declaration's envelope of its carry region) must fit the
plan's bound: the prompt, the retained frames and the largest call (MiniCPM-o: 1000 frames, 100
and 2 x 28, so 844). The speech tokenizer turns 16-kHz audio into 10-ms Whisper frames and strides
them 2 x 2 (25 tokens a second), so :func:`max_prompt_seconds` is the recording those frames come
from. Torch-free, so the command line's help and the face quote the same number
:mod:`adapters.token2wav.prompt` checks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from adapters.token2wav.config import CheckpointError
from adapters.token2wav.declared import CARRY_REGION, check_flow_declaration, flow_declaration
from engine.plan import make_plan

__all__ = [
    "HOP_16K",
    "MIN_PROMPT_S",
    "TOKENIZER_RATE",
    "PromptLimits",
    "max_prompt_seconds",
    "prompt_limits",
    "tokens_for",
]

MIN_PROMPT_S = 1.0
"""Below a second the x-vector (an average over the recording) describes little of the voice;
a policy, not a model limit. The default voice is 6 s."""
TOKENIZER_RATE = 16_000  # the speech tokenizer's and the speaker model's input rate
HOP_16K, _WHISPER_FRAMES_PER_TOKEN = 160, 4  # Whisper frames of 10 ms; the tokenizer strides 2 x 2


@dataclass(frozen=True)
class PromptLimits:
    """What a family's declaration allows of a voice prompt.

    ``max_frames`` = the envelope's frames minus what the plan's bound adds to the prompt
    (retained frames and the largest call); ``min_frames`` = the lookahead's tokens, which the
    flow's cache set-up reuses from the prompt's start.
    """

    frames_per_token: int
    vocabulary: int
    min_frames: int
    max_frames: int
    envelope_frames: int
    retained: int
    call_frames: int


@functools.cache
def prompt_limits(family: str = "minicpmo45") -> PromptLimits:
    """The prompt limits of ``family`` (a family or declaration name), from its plan at the
    declared prompt length (the carry's bound: prompt, retained frames, largest call)."""
    decl = flow_declaration(family)
    check_flow_declaration(decl)
    plan = make_plan(decl)
    values = plan.values
    region = decl.regions[CARRY_REGION]
    if region.envelope is None:
        raise CheckpointError(f"declaration {decl.name}: {CARRY_REGION} declares no envelope")
    envelope = region.envelope.shape[region.clock_axis]
    grows = plan.region(CARRY_REGION).bound - values["f_prompt"]  # retained + the largest call
    kept = region.retention.prompt  # a sliding window keeps none
    retained = 0 if kept is None else kept.evaluate(values)
    per_token = values["frames_per_token"]
    return PromptLimits(
        frames_per_token=per_token,
        vocabulary=values["vocab"],
        min_frames=per_token * values["lookahead"],
        max_frames=envelope - grows,
        envelope_frames=envelope,
        retained=retained,
        call_frames=grows - retained,
    )


def max_prompt_seconds(family: str = "minicpmo45") -> float:
    """The longest prompt whose tokens fit ``family``'s envelope (16.88 s for MiniCPM-o)."""
    limits = prompt_limits(family)
    whisper_frames = limits.max_frames // limits.frames_per_token * _WHISPER_FRAMES_PER_TOKEN
    return whisper_frames * HOP_16K / TOKENIZER_RATE


def tokens_for(samples_16k: int) -> int:
    """Tokens the 25 Hz tokenizer makes of ``samples_16k``: 10 ms frames, then two stride-2
    convolutions (each ``ceil(L / 2)``)."""
    after_first = -(-(samples_16k // HOP_16K) // 2)  # ceil division
    return -(-after_first // 2)

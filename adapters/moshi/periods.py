"""Moshi's period model and its warm-up: what each session, one or many, runs.

:class:`MoshiPeriods` is the period model: per period one frame of microphone audio (the
declared ``samples_per_frame`` at the frame clock's sample rate) through Mimi's encoder, the LM
and Mimi's decoder, the text piece the model said (its inner monologue: what it says, in
sentencepiece pieces; padding says nothing) and the speech frame. The phase rule is the face's
(:mod:`adapters.moshi.family`). :func:`warm_up` captures the replay arms' catalogs before
traffic; :func:`check_regions` holds the rings, tails, positions and the frame's regions to the
declaration.

Torch-free at import (the face imports this module; torch loads inside the functions).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adapters.face import FamilyError, Progress

if TYPE_CHECKING:
    import numpy as np

    from adapters.moshi.checkpoint import Vocabulary
    from adapters.moshi.stream import MoshiStream
    from engine.arms import Arm
    from engine.contract import Declaration
    from engine.duplex import PeriodStep, SpanFactory
    from engine.replay import ReplayEngine

__all__ = ["AUDIBLE_PEAK", "VOICE_RMS", "MoshiPeriods", "check_regions", "warm_up"]

AUDIBLE_PEAK = 1e-2  # -40 dBFS: a speech frame quieter than this is silence
VOICE_RMS = 0.05  # microphone RMS read as certain voice (voice_prob 1)


def check_regions(stream: MoshiStream, declaration: Declaration, values: dict[str, int]) -> None:
    """The state rule: every ring holds exactly what the declaration bounds; Mimi's
    convolutions keep at most the tails it declares (``mimi_conv_values``, the released codec's;
    a smaller codec keeps fewer, as a checkpoint's layers may be fewer than declared), the
    streams' counters, flags and small constants take at most its ``position_bytes``, and the
    frame's regions at most their declared values (a checkpoint's widths may be smaller)."""
    from engine.plan import make_plan

    name = declaration.name
    declared = {
        "lm_kv": values["main_capacity"],
        "depformer_kv": values["depformer_capacity"],
        "mimi_kv": values["mimi_capacity"],
    }
    for region, capacities in stream.ring_capacities().items():
        if capacities != {declared[region]}:
            raise FamilyError(
                f"the model's {region} rings hold {sorted(capacities)} entries, but "
                f"{name}.yaml bounds them at {declared[region]}: declare the checkpoint's value",
                "checkpoint",
            )
    if (held := stream.conv_values()) > values["mimi_conv_values"]:
        raise FamilyError(
            f"the model's Mimi convolutions keep {held:,} values between frames, over "
            f"{name}.yaml's bound mimi_conv_values={values['mimi_conv_values']:,}: "
            "declare the checkpoint's value",
            "checkpoint",
        )
    if (held := stream.held_bytes()["positions"]) > values["position_bytes"]:
        raise FamilyError(
            f"the model's streams keep {held:,} bytes of positions, flags and constants, over "
            f"{name}.yaml's bound position_bytes={values['position_bytes']:,}: "
            "declare the checkpoint's value",
            "checkpoint",
        )
    plan = {r.name: math.prod(r.demand_shape) for r in make_plan(declaration, values).regions}
    for region, tensors in stream.regions.declared().items():
        if (held := sum(t.numel() for t in tensors)) > plan[region]:
            raise FamilyError(
                f"the model's {region} holds {held:,} values a frame, over {name}.yaml's "
                f"{plan[region]:,}: declare the checkpoint's widths",
                "checkpoint",
            )


def warm_up(
    stream: MoshiStream,
    replay: ReplayEngine,
    *,
    seed: int,
    report: Progress,
    only_own_arm: bool = False,
) -> dict[str, Any]:
    """Capture every replay arm's catalog (an opening and a steady frame, each seen twice: the
    first warms, the second captures), then reset the stream, restore its arm and seal.
    ``only_own_arm``: the stream's own arm's catalog alone (a multiplexed session, whose memory
    counts: a later switch to another replay arm runs that arm eagerly, counted ``sealed``).

    The microphone frames are seeded noise (never zeros: a silent warm-up would warm nothing a
    conversation does not also reach, but proves less). Every arm is warmed, so a live switch
    replays from its first frame.
    """
    import torch

    from engine.arms import Arm
    from engine.warmup import warm_and_seal

    arm = stream.arm
    g = torch.Generator().manual_seed(seed)
    frames = [0.1 * torch.randn((1, 1, stream.spf), generator=g) for _ in range(2)]
    replay_arms = [a for a in Arm if a.replay and (a is arm or not only_own_arm)]

    def under(a: Arm) -> Callable[[], None]:
        def run() -> None:
            stream.set_arm(a)
            for _ in range(2):
                stream.reset()
                for frame in frames:
                    stream.step(frame.to(stream.device))

        return run

    def restore() -> None:
        stream.reset()
        stream.set_arm(arm)

    steps = [under(a) for a in replay_arms]
    done = warm_and_seal(replay, steps, report=report, device=stream.device, restore=restore)
    return {
        "arm": str(arm),
        "arms": [str(a) for a in replay_arms],
        "frames": 4 * len(replay_arms),
        **done,
    }


class MoshiPeriods:
    """The period model: one frame per period; see the module docstring for the phase rule."""

    def __init__(self, stream: MoshiStream, vocab: Vocabulary, *, period_s: float, rate: int):
        self.stream, self.vocab = stream, vocab
        self.period_s, self.input_rate, self.output_rate = period_s, rate, rate
        self._span: SpanFactory | None = None
        self._speaking = False

    @property
    def arm(self) -> Arm:
        return self.stream.arm

    def set_arm(self, arm: Arm) -> None:
        self.stream.set_arm(arm)

    @property
    def in_turn(self) -> bool:
        return self._speaking

    def set_stage_timer(self, span: SpanFactory | None) -> None:
        self._span = span

    def step(self, mic: np.ndarray) -> PeriodStep:
        import numpy as np
        import torch

        from engine.duplex import PeriodStep, Phase

        pcm = torch.from_numpy(np.ascontiguousarray(mic, dtype=np.float32))
        out = self.stream.step(pcm.to(self.stream.device).view(1, 1, -1), self._span)
        tokens = out.tokens[0, :, 0].tolist()
        text = self.vocab.piece(tokens[0])
        audio = [] if out.pcm is None else [out.pcm[0, 0]]
        audible = out.pcm is not None and float(out.pcm.abs().max()) > AUDIBLE_PEAK
        speaking = bool(text) or audible
        turn_end = self._speaking and not speaking
        self._speaking = speaking
        rms = float(np.sqrt(np.mean(np.square(mic, dtype=np.float64)))) if mic.size else 0.0
        return PeriodStep(
            phase=Phase.SPEAK if speaking else Phase.LISTEN,
            audio=audio,
            voice_prob=min(1.0, rms / VOICE_RMS),
            turn_end=turn_end,
            text=text,
            facts={"tokens": tokens},
        )

    def reset(self) -> None:
        self.stream.reset()
        self._speaking = False

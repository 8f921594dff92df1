"""PersonaPlex streams for the tests: seeded random weights at the small size (CPU) or the
released shapes (``full``, the GPU tests), a seeded recording as the voice, a preset role,
seeded noise in (never zeros). Runs, comparisons and digests are Moshi's (tests.moshi_small)."""

from __future__ import annotations

import torch

from adapters.moshi.checkpoint import MoshiModels, build_models
from adapters.moshi.regions import ring_shapes
from adapters.moshi.stream import MoshiStream
from adapters.personaplex.config import lm_kwargs, size_for
from adapters.personaplex.frame import PersonaPlexOps
from adapters.personaplex.prompt import PersonaPlexPrompt, Voice
from adapters.personaplex.voice import resolve_role
from engine.arms import Arm
from engine.declaration_io import load_declaration
from engine.replay import ReplayEngine
from tests.moshi_small import digest_main

DECLARATION = load_declaration("personaplex")
SPF = DECLARATION.values()["samples_per_frame"]
VOICE_FRAMES = 6  # a short seeded recording: the prompt phase stays a few dozen steps
ROLE = "casual"


def models(seed: int = 3, size: str = "small", device: str = "cpu") -> MoshiModels:
    from moshi.models import loaders

    s = size_for(size, DECLARATION)
    kwargs = lm_kwargs(s, loaders._lm_kwargs)
    return build_models(s, None, torch.device(device), seed, lm_kwargs=kwargs)


def voice(seed: int = 5, frames: int = VOICE_FRAMES) -> Voice:
    g = torch.Generator().manual_seed(seed)
    return Voice("seeded recording", pcm=0.2 * torch.randn((1, 1, frames * SPF), generator=g))


def prompt_for(m: MoshiModels, v: Voice | None = None, role: str = ROLE) -> PersonaPlexPrompt:
    values = DECLARATION.values()
    return PersonaPlexPrompt(
        voice() if v is None else v,
        resolve_role(role, None, m.lm.text_card),
        pad_text=values["prompt_pad_text"],
        silence=values["prompt_silence_frames"],
    )


def make_stream(
    arm: Arm,
    *,
    seed: int = 3,
    size: str = "small",
    device: str = "cpu",
    sdpa: str = "default",
    replay: ReplayEngine | None = None,
    m: MoshiModels | None = None,
    v: Voice | None = None,
) -> tuple[MoshiStream, ReplayEngine]:
    from moshi.models.lm import LMGen

    m = m or models(seed, size, device)
    replay = replay or ReplayEngine(device, strict=True, poison=True)
    stream = MoshiStream(
        m.mimi,
        LMGen(m.lm),
        replay=replay,
        arm=arm,
        samples_per_frame=SPF,
        sdpa=sdpa,
        rings=ring_shapes(DECLARATION, size_for(size, DECLARATION).point),
        ops=PersonaPlexOps,
        prompt=prompt_for(m, v),
        name="personaplex",
    )
    return stream, replay


def main() -> None:
    """One run in its own process: ``python -m tests.personaplex_small --device cuda --size full
    --frames 500 --seed 0 --arm SRc`` prints ``{"digest": ..., "frames": ...}``."""
    digest_main(make_stream, DECLARATION, main.__doc__, reset_at=(0,))


if __name__ == "__main__":
    main()

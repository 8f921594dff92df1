"""PersonaPlex on Moshi's stream at the small size on the CPU (seeded random weights, a seeded
recording or a stored voice, a preset role, seeded noise in): eager is reproducible run to run,
equals PersonaPlex's loop structure (bench/personaplex_style.py, an independent restatement of
its code), and every arm equals it across resets (each re-runs the prompt phase) and live
switches; the prompt phase is its own call kind, counted.

The fork itself (NVIDIA/personaplex) pins an old torch and collides with ``moshi``; it was run
against this stream outside CI (see the commit that added this file)."""

from __future__ import annotations

import pytest
import torch

from adapters.personaplex.prompt import Voice
from adapters.personaplex.voice import resolve_role
from bench.personaplex_style import style_peer
from engine.arms import Arm
from tests.moshi_small import every_arm_exact, first_difference, noise, run
from tests.personaplex_small import DECLARATION, make_stream, models, prompt_for

pytestmark = pytest.mark.usefixtures("one_thread")


def stored_voice(dim: int, seed: int = 11) -> Voice:
    """A stored voice's shape (the released ones are gated): seeded embeddings and cache."""
    g = torch.Generator().manual_seed(seed)
    embeddings = 0.5 * torch.randn((4, 1, 1, dim), generator=g)
    return Voice(
        "stored", embeddings=embeddings, cache=torch.randint(0, 2048, (1, 17, 4), generator=g)
    )


def test_eager_is_reproducible_and_a_new_conversation_reruns_the_prompts() -> None:
    stream, _ = make_stream(Arm.EAGER)
    frames = noise(6, seed=1)
    first = run(stream, frames, seed=0, reset_at=(0,))
    assert stream.frames > len(frames)  # the prompt's steps count before the frames
    again = run(stream, frames, seed=0, reset_at=(0,))
    assert first_difference(first, again) is None
    other = resolve_role("assistant", None, stream.ops.lm.text_card)
    stream.prompt.set(stream.prompt.voice, other)  # type: ignore[union-attr]
    changed = run(stream, frames, seed=0, reset_at=(0,))
    assert first_difference(first, changed) is not None


@pytest.mark.parametrize("kind", ["recording", "stored"])
def test_our_eager_equals_personaplex_loop_structure(kind: str) -> None:
    m = models()
    v = stored_voice(m.lm.dim) if kind == "stored" else None
    frames = noise(8, seed=7)
    stream, _ = make_stream(Arm.EAGER, m=m, v=v)
    outs = run(stream, frames, seed=1, reset_at=(0,))
    stream.close()
    reference = [(o.tokens, o.pcm) for o in outs]
    p = prompt_for(m, v)
    result = style_peer(
        m, "default", frames, reference, graphs=False, voice=p.voice, role=p.role,
        point=DECLARATION.values(), seed=1,
    )  # fmt: skip
    assert result["exact_frames"] == len(frames)


def test_every_arm_equals_eager_across_resets_and_live_switches() -> None:
    stream, _ = make_stream(Arm.EAGER, v=stored_voice(64))
    every_arm_exact(stream, noise(9, seed=3), seed=2)


def test_the_prompt_phase_is_its_own_call_kind_and_counted() -> None:
    stream, replay = make_stream(Arm.R)
    replay.reset_counters()
    stream.reset()
    steps = stream.frames
    ops = replay.snapshot()["ops"]

    def calls(name: str) -> int:
        op = ops[f"personaplex.{name}"]
        return int(op["hits"] + op["captures"] + sum(op["misses"].values()))

    assert calls("prompt_open") == 1
    assert calls("prompt") == steps - 1
    assert calls("mimi_encode") == stream.prompt.voice.pcm.shape[-1] // stream.spf  # type: ignore[union-attr]
    assert ops["personaplex.prompt"]["misses"] == {"host_randomness": steps - 1}  # CPU: counted
    assert calls("lm_step") == 0  # no conversation frame yet

"""PersonaPlex on Moshi's stream at the small size on the CPU (seeded random weights, a seeded
recording or a stored voice, a preset role, seeded noise in): eager is reproducible run to run,
equals PersonaPlex's loop structure (bench/personaplex_style.py, an independent restatement of
its code), and every arm equals it across resets (each re-runs the prompt phase) and live
switches; the prompt phase is its own call kind, counted.

The fork itself (NVIDIA/personaplex) pins an old torch and collides with ``moshi``; it was run
against this stream outside CI (see the commit that added this file)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from adapters.moshi.frame import vendor_graphs_off
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


class _Ops(TorchDispatchMode):
    """Counts the aten operators run inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def test_a_frame_computes_only_the_samples_it_keeps() -> None:
    """The user's codebooks are given at every step: a steady frame samples the text and the
    agent's codebooks (a softmax each) and only draws for the user's (an ``exponential_`` for
    every codebook, as the vendor's sampling draws); a prompt step, all given, samples nothing
    and draws all the same. The depformer's per-step feed-forward joins no one-tensor list
    (the attention's projections do at one layer: the clock applies them at two or more)."""
    stream, _ = make_stream(Arm.EAGER)
    frames = noise(3, seed=5)
    torch.manual_seed(0)
    stream.reset()
    stream.step(frames[0])
    ops, q, dep_q = stream.ops, stream.audio_q, stream.dep_q
    with torch.no_grad(), vendor_graphs_off(stream.device):
        codes = ops.encode(frames[1])
        with _Ops() as lm:
            text, hidden = ops.lm_step(codes)
        with _Ops() as frame:
            ops.depformer_step(text, hidden)
        with _Ops() as prompt:
            ops.prompt_step(ops.initial[:, 1 : 1 + q], ops.initial[:, 1 + q :], ops.initial[0, 0])
    assert lm.count["_softmax"] == 1 and lm.count["exponential_"] == 1  # the text
    assert frame.count["_softmax"] == q and frame.count["exponential_"] == dep_q
    assert frame.count["cat"] == 1 + 2 * q  # the frame's tokens; in/out projections a step
    assert prompt.count["_softmax"] == 0 and prompt.count["exponential_"] == 1 + dep_q
    assert len(ops.lm.depformer.layers) == 1

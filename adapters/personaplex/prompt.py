"""PersonaPlex's prompt phase: the voice and the role, stepped after every reset, before the call.

What PersonaPlex steps (its ``LMGen.step_system_prompts``; read, not copied), every step with
the user's side given as a 440-Hz sine's Mimi codes (:data:`SINE_CODES`):

1. the voice: a recording's frames (Mimi-encoded, given as the agent's audio, the text given as
   PAD), or a stored voice (the released ``NAME.pt``): its temporal inputs in place of the
   embedded codes, then its delay cache copied in;
2. ``prompt_silence_frames`` of silence (:data:`SILENCE_CODES` as the agent's audio, PAD text);
3. the role: ``<system> TEXT <system>`` in text tokens, one a step, over silence;
4. silence again; then Mimi is reset, and the conversation starts.

Each step samples all the same (the draws the conversation's generator continues from). The
phase is its own call kind: three operators (``prompt_open``, the first step after a reset, which
only fills the cache; ``prompt``; ``prompt_embedding``), registered on the stream's replay
engine, replayed or eager under the stream's arm and counted as its frames are.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from engine.signature import Catalog, Signature, TensorSpec

if TYPE_CHECKING:
    from adapters.moshi.stream import MoshiStream
    from adapters.personaplex.frame import PersonaPlexOps
    from engine.replay import ReplayOp

__all__ = ["SILENCE_CODES", "SINE_CODES", "PersonaPlexPrompt", "Role", "Voice"]

# Mimi's codes of a silent frame and of a 440-Hz sine frame, as PersonaPlex states them (its
# lm.py): codes of the released Mimi, so they hold for its weights (any codes do for random ones).
SILENCE_CODES = (948, 243, 1178, 546, 1736, 1030, 1978, 2008)
SINE_CODES = (430, 1268, 381, 1611, 1095, 1495, 56, 472)


@dataclass(frozen=True)
class Voice:
    """A voice prompt: a recording (``pcm``) or a stored voice (``embeddings`` and ``cache``)."""

    name: str  # what the window shows: "NATF2", "me.wav", "seeded noise"
    pcm: Tensor | None = None  # (1, 1, frames * spf) float32 at the model's rate
    embeddings: Tensor | None = None  # (N, 1, 1, dim): a stored voice's temporal inputs
    cache: Tensor | None = None  # (1, codebooks, width): the delay cache they leave


@dataclass(frozen=True)
class Role:
    """A role prompt: its name (a preset's, or ``custom``), its text and its text tokens."""

    name: str
    text: str
    tokens: tuple[int, ...]


_Step = tuple[str, tuple[Tensor, ...]]  # operator name, its arguments


class PersonaPlexPrompt:
    """The prompt phase of one stream (a ``PromptPhase``); :meth:`set` changes the voice and
    role for the next reset."""

    def __init__(self, voice: Voice | None, role: Role, *, pad_text: int, silence: int) -> None:
        self.voice, self.role = voice, role
        self.pad_text, self.silence = pad_text, silence
        self._ops: dict[str, ReplayOp] = {}
        self._eager: dict[str, Callable[..., Any]] = {}
        self._regions: dict[str, tuple[Tensor, ...]] = {}

    def set(self, voice: Voice | None, role: Role) -> None:
        self.voice, self.role = voice, role

    # -- PromptPhase --------------------------------------------------------------------------

    def register(self, stream: MoshiStream) -> None:
        ops: PersonaPlexOps = stream.ops  # type: ignore[assignment]
        dev, q, lm = stream.device, stream.audio_q, ops.lm
        self._sine = torch.tensor(SINE_CODES, device=dev).view(1, q, 1)
        self._silence = torch.tensor(SILENCE_CODES, device=dev).view(1, q, 1)
        self._pad = torch.tensor([self.pad_text], device=dev)
        codes, text = torch.zeros_like(self._sine), torch.zeros_like(self._pad)
        agent = torch.zeros_like(self._sine)
        embedding = torch.zeros((1, 1, lm.dim), dtype=lm.dtype, device=dev)
        forms: dict[str, tuple[Callable[..., Any], tuple[Tensor, ...]]] = {
            "prompt_open": (ops.open, (codes, agent, text)),
            "prompt": (ops.prompt_step, (codes, agent, text)),
            "prompt_embedding": (ops.embedding_step, (embedding, codes, agent, text)),
        }
        sdpa = ("sdpa", ops.sdpa)
        for name, (fn, regions) in forms.items():
            extra: Hashable = None if name == "prompt_open" else sdpa
            specs = tuple(TensorSpec(tuple(r.shape), r.dtype, dev) for r in regions)
            written = _written(stream, regions)
            self._eager[name], self._regions[name] = fn, regions
            self._ops[name] = stream.replay.register(
                f"{stream.name}.{name}",
                fn,
                catalog=Catalog([Signature.of(specs, extra=extra)]),
                write_through=written,
                extra_key=(lambda e=extra: e),  # type: ignore[misc]
            )
            self._ops[f"{name}_regions"] = stream.replay.register(
                f"{stream.name}.{name}_regions",
                _reading(fn, regions),
                catalog=Catalog([Signature.of((), extra=extra)]),
                write_through=written,
                extra_key=(lambda e=extra: e),  # type: ignore[misc]
            )
            self._eager[f"{name}_regions"] = _reading(fn, regions)

    def run(self, stream: MoshiStream) -> int:
        ops: PersonaPlexOps = stream.ops  # type: ignore[assignment]
        steps = 0
        for name, args in self._steps(stream):
            self._call(stream, "prompt_open" if steps == 0 else name, args)
            steps += 1
        ops.mimi.reset_streaming()  # the voice's frames went through the encoder
        return steps

    # -- the steps ------------------------------------------------------------------------------

    def _steps(self, stream: MoshiStream) -> Iterator[_Step]:
        voice, sine, silence, pad = self.voice, self._sine, self._silence, self._pad
        if voice is not None and voice.embeddings is not None:
            ops: PersonaPlexOps = stream.ops  # type: ignore[assignment]
            q = stream.audio_q
            user, agent = ops.initial[:, 1 : 1 + q], ops.initial[:, 1 + q : 1 + 2 * q]
            yield "prompt", (user, agent, pad)  # PersonaPlex opens with its dummy tokens
            for embedding in voice.embeddings.to(device=stream.device, dtype=ops.lm.dtype):
                yield "prompt_embedding", (embedding, user, agent, pad)
            assert voice.cache is not None
            ops.load_cache(voice.cache)  # the delay cache the stored steps left, as stored
        elif voice is not None and voice.pcm is not None:
            frames = voice.pcm.to(stream.device).reshape(-1, 1, 1, stream.spf)  # frame strides
            for frame in frames:
                yield "prompt", (sine, _encode(stream, frame), pad)
        for _ in range(self.silence):
            yield "prompt", (sine, silence, pad)
        tokens = torch.tensor(self.role.tokens, device=stream.device, dtype=torch.long)
        for i in range(len(self.role.tokens)):
            yield "prompt", (sine, silence, tokens[i : i + 1])
        for _ in range(self.silence):
            yield "prompt", (sine, silence, pad)

    def _call(self, stream: MoshiStream, name: str, args: tuple[Tensor, ...]) -> None:
        """Under the state rule the step's inputs go into its regions; under the stock arms
        they are fresh tensors laid out as the catalog's (a view of a stored voice or a role
        would carry other strides)."""
        arm, regions = stream.arm, self._regions[name]
        if arm.state_rule:
            for region, value in zip(regions, args, strict=True):
                region.copy_(value)
            name = f"{name}_regions"
            args = ()
        else:
            args = tuple(torch.empty_like(r).copy_(a) for r, a in zip(regions, args, strict=True))
        (self._ops[name] if arm.replay else self._eager[name])(*args)


def _reading(fn: Callable[..., Any], regions: tuple[Tensor, ...]) -> Callable[[], Any]:
    """``fn`` over its regions (the state rule's form: no argument, inputs read in place)."""

    def call() -> Any:
        return fn(*regions)

    return call


def _written(stream: MoshiStream, regions: tuple[Tensor, ...]) -> Callable[[], tuple[Tensor, ...]]:
    def written() -> tuple[Tensor, ...]:
        return (*stream.written(), *regions)

    return written


def _encode(stream: MoshiStream, pcm: Tensor) -> Tensor:
    """One voice frame through Mimi's encoder under the stream's arm: ``(1, audio_q, 1)``."""
    arm, op = stream.arm, stream.replayed["mimi_encode"]
    if arm.state_rule:
        stream.regions.mic.copy_(pcm)
        (op if arm.replay else stream.encode_into)()
        return stream.regions.codes
    codes: Tensor = (op if arm.replay else stream.ops.encode)(pcm)
    return codes

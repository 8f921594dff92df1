"""One PersonaPlex frame as Moshi's four device-only operators, with PersonaPlex's step, and the
prompt phase's steps.

PersonaPlex (NVIDIA/personaplex, MIT) runs the Moshi architecture with three differences, which
we write here on top of ``moshi`` 0.2.13 (the fork was read, nothing copied):

1. ``dep_q`` = 16: the depformer samples the agent's 8 codebooks and then the user's 8, and a
   codebook whose value is given (the user's, from the microphone; any, in a prompt) is
   teacher-forced: the next codebook's input is the given value, not the sample.
2. its delay cache: every value given for a step (user codes, and in the prompt phase the
   agent's codes and the text token) is written at ``offset + delay`` and marked given; a step
   reads the cache at ``offset - 1``, forces the given values at ``offset`` and writes what it
   sampled where nothing was given; the very first step after a reset only fills the cache
   (:meth:`PersonaPlexOps.open`, no model call);
3. the prompt phase (:meth:`PersonaPlexOps.prompt_step`, :meth:`PersonaPlexOps.embedding_step`):
   steps whose agent audio, text and user audio are all given (a voice prompt, silence, the role
   text), or whose temporal input is a stored embedding (the released voices).

What a sample that is forced away would cost is not spent (the same bits: only its draws count,
and those are made): the user's codebooks are given at every step, so the depformer computes the
agent's only and draws for the user's (:meth:`PersonaPlexOps._draw`); a prompt step's text and
codebooks are all given, so it runs the temporal step (its ring) and only draws.

Its LM's RMS norms run eager, as PersonaPlex's code runs them (:mod:`adapters.personaplex.norms`:
``moshi`` compiles them on CUDA, which rounds differently); its rings, Mimi's and the LM's, label
their slots as its fork does (:mod:`adapters.personaplex.rings`: once full, the oldest slot is
not attended).

Same rules as :class:`~adapters.moshi.frame.FrameOps`: no host branch and no host sync inside an
operator (the offset lives on the device), so each can be captured as one CUDA graph; sampling
draws from the device's default generator in the vendor's order (text, then each codebook).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from adapters.moshi.frame import FrameOps
from adapters.personaplex.norms import eager_norms
from adapters.personaplex.rings import personaplex_rings

__all__ = ["PersonaPlexOps"]


class PersonaPlexOps(FrameOps):
    """PersonaPlex's step over ``mimi`` and ``lm_gen`` (the LM built with ``dep_q`` = 16 and its
    delays); ``lm_gen`` only streams the LM (its own delay cache is unused)."""

    def __init__(self, mimi: Any, lm_gen: Any, *, sdpa: str = "default") -> None:
        super().__init__(mimi, lm_gen, sdpa=sdpa)
        lm, device = self.lm, self.lm.device
        eager_norms(lm)  # as PersonaPlex's code runs them (moshi compiles them on CUDA)
        self.codebooks: int = lm.num_codebooks  # text + agent + user
        self.max_delay = max(lm.delays)
        # the depformer steps computed: the agent's; the user's codebooks (after them) are
        # given at every step (the microphone's, or a prompt's), so their samples never count
        self.computed: int = min(self.audio_q, self.dep_q)
        width = self.max_delay + 3  # PersonaPlex's cache width (its stored voices hold one)
        self.delays = torch.tensor(lm.delays, device=device, dtype=torch.long)
        self.initial: Tensor = lm._get_initial_token()  # (1, K, 1)
        self.cache = torch.full(
            (1, self.codebooks, width), lm.ungenerated_token_id, device=device, dtype=torch.long
        )
        self.given = torch.zeros((1, self.codebooks, width), device=device, dtype=torch.bool)
        self.offset = torch.zeros((1,), device=device, dtype=torch.long)
        self._true = torch.ones((1, self.codebooks, 1), device=device, dtype=torch.bool)

    @classmethod
    def own_rings(cls, mimi: Any, lm: Any) -> int:
        """The fork's rings (:mod:`adapters.personaplex.rings`): once full, the oldest slot is
        not attended (its Mimi parts from ``moshi``'s at frame 124 otherwise)."""
        return personaplex_rings(mimi, lm)

    def reset(self) -> None:
        self.cache.fill_(self.lm.ungenerated_token_id)
        self.given.zero_()
        self.offset.zero_()

    def state_tensors(self) -> tuple[Tensor, ...]:
        return (self.cache, self.given, self.offset)

    def kept(self) -> tuple[Tensor, ...]:
        """Moshi's, and the constants the step reads: the delays, the initial tokens and the
        given mark."""
        return (*super().kept(), self.delays, self.initial, self._true)

    def load_cache(self, cache: Tensor) -> None:
        """A stored voice's delay cache, copied in after its embeddings (as PersonaPlex does)."""
        self.cache.copy_(cache.to(self.cache.device))

    # -- the operators ------------------------------------------------------------------------

    def lm_step(self, codes: Tensor) -> tuple[Tensor, Tensor]:
        """The user's codes given, the temporal step, the text token: ``(text, hidden)``."""
        self._give(codes=codes)
        return self._temporal(None)

    def depformer_step(self, text: Tensor, hidden: Tensor) -> Tensor:
        """The agent's codebooks sampled (given ones forced), the user's drawn for and not
        computed, the cache written where nothing was given, the delayed frame out:
        ``(1, 1 + dep_q, 1)``; ``-2`` while none is ready."""
        gen, lm = self.lm_gen, self.lm
        width = self.cache.shape[2]
        read = self._at((self.offset - 1) % width)
        target = self._at(self.offset % width)
        forced = self.cache.gather(2, target)[:, 1:, 0]
        given = self.given.gather(2, target)[:, 1:, 0]
        self._open_depformer()
        prev, sampled = text, []
        for cb in range(self.computed):
            logits = lm.forward_depformer(cb, prev[:, None, None], hidden)
            token = self._sample(logits.float(), gen.use_sampling, gen.temp, gen.top_k)[:, 0, 0]
            prev = torch.where(given[:, cb], forced[:, cb], token)
            sampled.append(token)
        for cb in range(self.computed, self.dep_q):  # the user's: given at every step
            self._draw(gen.temp, gen.top_k, lm.linears[cb].out_features)
            sampled.append(forced[:, cb])
        self.given.scatter_(2, read, torch.zeros_like(self._true))
        now = torch.cat([text.view(1, 1, 1), torch.stack(sampled, dim=1)[:, :, None]], dim=1)
        kept = self.given.gather(2, target)
        self.cache.scatter_(2, target, torch.where(kept, self.cache.gather(2, target), now))
        index = ((self.offset - self.max_delay + self.delays) % width).view(1, -1, 1)
        out = self.cache.gather(2, index)
        unready = self.offset <= self.max_delay
        out = torch.where(unready.view(1, 1, 1), lm.ungenerated_token_id, out)
        self.offset.add_(1)
        return out[:, : 1 + self.dep_q]

    def open(self, codes: Tensor, agent: Tensor, text: Tensor) -> None:
        """The first step after a reset: the given values and the initial tokens into the cache;
        no model call (PersonaPlex's first step returns before its transformer)."""
        self._give(codes=codes, agent=agent, text=text)
        self.offset.add_(1)

    def prompt_step(self, codes: Tensor, agent: Tensor, text: Tensor) -> None:
        """One prompt step: user audio, agent audio and text all given; sampled all the same
        (the draws a conversation's generator continues from)."""
        self._give(codes=codes, agent=agent, text=text)
        self._given_step(None)

    def embedding_step(self, embedding: Tensor, codes: Tensor, agent: Tensor, text: Tensor) -> None:
        """One step of a stored voice: the temporal input is ``embedding`` (1, 1, dim)."""
        self._give(codes=codes, agent=agent, text=text)
        self._given_step(embedding)

    # -- the parts ----------------------------------------------------------------------------

    def _at(self, position: Tensor) -> Tensor:
        return position.view(1, 1, 1).expand(1, self.codebooks, 1)

    def _give(
        self, *, codes: Tensor, agent: Tensor | None = None, text: Tensor | None = None
    ) -> None:
        """Write the given values at ``offset + delay`` and mark them given, then the initial
        tokens of the codebooks whose delay the offset has not passed yet."""
        width = self.cache.shape[2]
        q = self.audio_q
        parts: list[tuple[int, Tensor]] = [(1 + q, codes[:, :q])]
        if agent is not None:
            parts.append((1, agent[:, :q]))
        if text is not None:
            parts.append((0, text.view(1, 1, 1)))
        for start, values in parts:
            rows = slice(start, start + values.shape[1])
            at = ((self.offset + self.delays[rows]) % width).view(1, -1, 1)
            self.cache[:, rows].scatter_(2, at, values)
            self.given[:, rows].scatter_(2, at, self._true[:, rows])
        at = self._at(self.offset % width)
        early = (self.offset <= self.delays).view(1, -1, 1)
        self.cache.scatter_(2, at, torch.where(early, self.initial, self.cache.gather(2, at)))
        self.given.scatter_(2, at, self.given.gather(2, at) | early)

    def _temporal(self, embedding: Tensor | None) -> tuple[Tensor, Tensor]:
        """The temporal step on the cache at ``offset - 1`` (or on ``embedding``), the text token
        sampled and, where given, forced: ``(text, hidden)``."""
        gen, lm = self.lm_gen, self.lm
        width = self.cache.shape[2]
        with self._attention():
            if embedding is None:
                input_ = self.cache.gather(2, self._at((self.offset - 1) % width))
                hidden, logits = lm.forward_text(input_)
            else:
                hidden = lm.transformer(embedding)
                if lm.out_norm:
                    hidden = lm.out_norm(hidden)
                logits = lm.text_linear(hidden)[:, None]
        sampled = self._sample(logits.float(), gen.use_sampling, gen.temp_text, gen.top_k_text)
        target = self._at(self.offset % width)[:, :1]
        given = self.given[:, :1].gather(2, target)[:, 0, 0]
        forced = self.cache[:, :1].gather(2, target)[:, 0, 0]
        return torch.where(given, forced, sampled[:, 0, 0]), hidden

    def _given_step(self, embedding: Tensor | None) -> None:
        """A step whose text and codebooks are all given (a prompt step): the temporal step
        for its ring; every sample it would take is forced away, so only the draws are made.
        The cache keeps every given value, so only the read slot's marks and the offset move."""
        gen, lm = self.lm_gen, self.lm
        width = self.cache.shape[2]
        with self._attention():
            if embedding is None:  # the text logits too (the vendor's call), unused
                lm.forward_text(self.cache.gather(2, self._at((self.offset - 1) % width)))
            else:
                lm.transformer(embedding)
        self._draw(gen.temp_text, gen.top_k_text, lm.text_linear.out_features)
        for cb in range(self.dep_q):
            self._draw(gen.temp, gen.top_k, lm.linears[cb].out_features)
        self.given.scatter_(2, self._at((self.offset - 1) % width), torch.zeros_like(self._true))
        self.offset.add_(1)

    def _draw(self, temp: float, top_k: int, card: int) -> None:
        """The draws sampling ``card`` logits makes, for a sample that is forced away: the
        vendor's ``sample_token`` (top-k, no top-p) draws one ``exponential_`` over its ``k``
        float probabilities; greedy draws nothing. Same call, same shape: the generator
        advances as the vendor's does, and nothing is computed for the thrown-away sample."""
        if self.lm_gen.use_sampling and temp > 0.0:
            k = min(top_k, card) if top_k > 0 else card
            torch.empty((1, k), dtype=torch.float32, device=self.cache.device).exponential_(1)

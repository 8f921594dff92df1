"""The benchmark's peer: PersonaPlex's own loop structure, on our models and the same kernels.

PersonaPlex (NVIDIA/personaplex) steps its ``LMGen`` with a host-side offset: each step writes
the given values into the delay cache by slicing, marks them given, returns before the model on
the first step, runs the temporal step (on the codes, or a stored voice's embedding) and the
depformer as two graphed calls (the ``moshi`` package's ``CUDAGraphed``, the depformer opening a
fresh streaming state inside its graph), and writes the samples back with host indices. Its
package pins an old torch and collides with ``moshi``, so :class:`StyleLoop` restates that
structure over the PyPI package's modules (read from its code, written here): the same work, in
its own shape, so its time is what PersonaPlex's graphs cost on these kernels and its tokens
check ours independently (every frame, the prompt phase included, must be equal). Its RMS norms
run eager, as PersonaPlex's do (:mod:`adapters.personaplex.norms`); its Mimi's and LM's rings are
the fork's (:mod:`adapters.personaplex.rings`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import Tensor

from adapters.moshi.checkpoint import MoshiModels
from adapters.personaplex.norms import eager_norms
from adapters.personaplex.prompt import SILENCE_CODES, SINE_CODES, Role, Voice
from adapters.personaplex.rings import personaplex_rings
from bench.moshi import Frame, _graphs, exact_frames, peak, percentiles, sync, timed_frames

__all__ = ["StyleLoop", "style_peer"]


class StyleLoop:
    """PersonaPlex's step structure over ``models`` (LM and Mimi streaming, batch 1)."""

    def __init__(self, models: MoshiModels, sdpa: str, *, graphs: bool) -> None:
        from moshi.models.lm import LMGen
        from moshi.utils.compile import CUDAGraphed

        lm = models.lm
        eager_norms(lm)  # PersonaPlex's norms run eager (moshi's are compiled on CUDA)
        self.lm, self.mimi, self.sdpa = lm, models.mimi, sdpa
        self.gen = LMGen(lm)  # its sampling defaults only
        self.q: int = models.mimi.num_codebooks
        self.delays: list[int] = list(lm.delays)
        self.max_delay = max(self.delays)
        width = self.max_delay + 3
        shape = (1, lm.num_codebooks, width)
        self.cache = torch.full(shape, lm.ungenerated_token_id, dtype=torch.long, device=lm.device)
        self.given = torch.zeros_like(self.cache, dtype=torch.bool)
        self.initial = lm._get_initial_token()
        self.offset = 0
        off = not graphs or lm.device.type != "cuda"
        self.main = CUDAGraphed(self._codes, disable=off)
        self.embed = CUDAGraphed(self._embedding, disable=off)
        self.depth = CUDAGraphed(self._depth, disable=off)

    def reset(self) -> None:
        self.cache.fill_(self.lm.ungenerated_token_id)
        self.given.zero_()
        self.offset = 0

    def step(
        self,
        user: Tensor,
        agent: Tensor | None = None,
        text: int | None = None,
        embedding: Tensor | None = None,
    ) -> Tensor | None:
        n, width, q = self.offset, self.cache.shape[2], self.q
        given: list[tuple[int, Any]] = [(1 + q + i, user[:, i, 0]) for i in range(q)]
        if agent is not None:
            given += [(1 + i, agent[:, i, 0]) for i in range(q)]
        if text is not None:
            given.append((0, text))
        for k, value in given:
            at = (n + self.delays[k]) % width
            self.cache[:, k, at] = value
            self.given[:, k, at] = True
        for k, delay in enumerate(self.delays):
            if n <= delay:
                self.cache[:, k, n % width] = self.initial[:, k, 0]
                self.given[:, k, n % width] = True
        if n == 0:
            self.cache[:, :, 0] = self.initial[:, :, 0]
            self.offset = 1
            return None
        read, target = (n - 1) % width, n % width
        forced = self.cache[:, :, target : target + 1]
        mask = self.given[:, :, target : target + 1]
        if embedding is None:
            hidden, logits = self.main(self.cache[:, :, read : read + 1])
        else:
            hidden, logits = self.embed(embedding)
        from moshi.utils.sampling import sample_token

        gen = self.gen
        sampled = sample_token(logits.float(), gen.use_sampling, gen.temp_text, gen.top_k_text)
        sampled = sampled[:, 0, 0]
        chosen = torch.where(mask[:, 0, 0], forced[:, 0, 0], sampled)
        audio = self.depth(chosen, hidden, forced[:, 1:, 0], mask[:, 1:, 0])
        self.given[:, :, read] = False
        self.cache[:, 0, target] = torch.where(
            ~self.given[:, 0, target], sampled, self.cache[:, 0, target]
        )
        self.cache[:, 1:, target] = torch.where(
            ~self.given[:, 1:, target], audio, self.cache[:, 1:, target]
        )
        self.offset = n + 1
        if n <= self.max_delay:
            return None
        index = torch.tensor(
            [(n - self.max_delay + d) % width for d in self.delays], device=self.cache.device
        )
        return self.cache.gather(2, index.view(1, -1, 1))

    def prompt(self, voice: Voice | None, role: Role, *, pad: int, silence: int, spf: int) -> int:
        """PersonaPlex's prompt phase (voice, silence, role, silence); Mimi reset after it."""
        dev, q = self.cache.device, self.q
        sine = torch.tensor(SINE_CODES, device=dev).view(1, q, 1)
        quiet = torch.tensor(SILENCE_CODES, device=dev).view(1, q, 1)
        steps = 0
        if voice is not None and voice.embeddings is not None:
            user, agent = self.initial[:, 1 : 1 + q], self.initial[:, 1 + q :]
            self.step(user, agent, pad)  # returns at offset 0; the first embedding follows
            steps += 1
            for embedding in voice.embeddings.to(device=dev, dtype=self.lm.dtype):
                self.step(user, agent, pad, embedding)
                steps += 1
            assert voice.cache is not None
            self.cache.copy_(voice.cache)
        elif voice is not None and voice.pcm is not None:
            for frame in voice.pcm.to(dev).reshape(-1, 1, 1, spf):
                self.step(sine, self.mimi.encode(frame), pad)
                steps += 1
        for token in [pad] * silence + list(role.tokens) + [pad] * silence:
            self.step(sine, quiet, token)
            steps += 1
        self.mimi.reset_streaming()
        return steps

    # -- the three graphed functions -------------------------------------------------------------

    def _codes(self, codes: Tensor) -> tuple[Tensor, Tensor]:
        with _kernel(self.sdpa):
            out: tuple[Tensor, Tensor] = self.lm.forward_text(codes)
        return out

    def _embedding(self, embedding: Tensor) -> tuple[Tensor, Tensor]:
        lm = self.lm
        with _kernel(self.sdpa):
            hidden = lm.transformer(embedding)
        if lm.out_norm:
            hidden = lm.out_norm(hidden)
        return hidden, lm.text_linear(hidden)[:, None]

    def _depth(self, text: Tensor, hidden: Tensor, forced: Tensor, mask: Tensor) -> Tensor:
        from moshi.utils.sampling import sample_token

        lm, gen = self.lm, self.gen
        prev, tokens = text, []
        with lm.depformer.streaming(1):
            for cb in range(lm.dep_q):
                logits = lm.forward_depformer(cb, prev[:, None, None], hidden)
                token = sample_token(logits.float(), gen.use_sampling, gen.temp, gen.top_k)
                token = token[:, 0, 0]
                prev = torch.where(mask[:, cb], forced[:, cb], token)
                tokens.append(token)
        return torch.stack(tokens, dim=1)


@contextmanager
def _kernel(sdpa: str) -> Iterator[None]:
    if sdpa == "default":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[sdpa]
    with sdpa_kernel([backend]):
        yield


def style_peer(
    models: MoshiModels,
    sdpa: str,
    frames: list[Tensor],
    reference: list[Frame | None],
    *,
    graphs: bool,
    voice: Voice | None,
    role: Role,
    point: dict[str, int],
    seed: int,
    warm: int = 4,
) -> dict[str, Any]:
    """The style loop over ``frames`` after its warm-up (4 frames, as PersonaPlex warms) and the
    prompt phase; frame times, memory, the prompt's time, frames equal to ``reference``."""
    device = frames[0].device
    with ExitStack() as stack:
        stack.enter_context(models.mimi.streaming(1))
        stack.enter_context(models.lm.streaming(1))
        personaplex_rings(models.mimi, models.lm)  # the fork's rings, as PersonaPlex keeps them
        stack.enter_context(torch.no_grad())
        loop = StyleLoop(models, sdpa, graphs=graphs)
        q = loop.q

        def step(frame: Tensor) -> Frame | None:
            with _graphs(graphs, device):
                out = loop.step(models.mimi.encode(frame))
                if out is None:
                    return None
                pcm = models.mimi.decode(out[:, 1 : 1 + q])
            return out.cpu(), pcm.cpu()

        timed_frames(step, frames[:warm], device)  # its graphs capture here
        models.mimi.reset_streaming()
        models.lm.reset_streaming()
        loop.reset()
        torch.manual_seed(seed)
        with peak(device) as memory:
            sync(device)
            t0 = time.perf_counter()
            with _graphs(graphs, device):
                steps = loop.prompt(
                    voice, role, pad=point["prompt_pad_text"],
                    silence=point["prompt_silence_frames"], spf=frames[0].shape[-1],
                )  # fmt: skip
            sync(device)
            reset_ms = (time.perf_counter() - t0) * 1e3
            outs, ms = timed_frames(step, frames, device)
    return {
        **percentiles(ms[1:]),
        "frames": len(frames),
        "exact_frames": exact_frames(outs, reference[: len(frames)]),
        "prompt_steps": steps,
        "reset_ms": round(reset_ms, 2),
        "first_answer_ms": round(reset_ms + ms[0], 2),
        **memory,
    }

"""One Moshi frame as four device-only operators over the vendor's modules and streaming state.

The vendor's loop (``moshi`` 0.2.13) per 80-ms frame is ``codes = mimi.encode(pcm)``,
``tokens = lm_gen.step(codes)``, ``pcm = mimi.decode(tokens[:, 1:])`` (no decode while ``step``
returns None: the first frame after a reset). :class:`FrameOps` computes exactly that, bit for
bit, split at the vendor's own graph boundaries:

- :meth:`FrameOps.encode`: Mimi's streaming encode, ``pcm (1, 1, spf) -> codes (1, dep_q, 1)``;
- :meth:`FrameOps.lm_step`: ``LMGen._step`` up to the text token: the user codes into the
  delay cache, the temporal transformer over its ring (``forward_text``, attention kernel pinned)
  and the text sample, ``codes -> (text (1,), hidden (1, 1, dim))``;
- :meth:`FrameOps.depformer_step`: the depformer over the ``dep_q`` codebooks (its ring reset in
  place first, where the vendor opens a fresh one each frame), each sampled, then the rest of
  ``LMGen._step``: the tokens into the delay cache and the delayed frame out,
  ``(text, hidden) -> tokens (1, 1 + dep_q, 1)``;
- :meth:`FrameOps.decode`: Mimi's streaming decode of ``tokens[:, 1:]``, ``-> pcm (1, 1, spf)``.

What differs from the vendor's code, never its values: no host branch and no host sync inside an
operator (``state.offsets`` is written in place instead of rebound; the "not generated yet" mask
is a ``torch.where`` instead of a boolean-index assignment), so each operator, and a frame of
them, can be captured as one CUDA graph. Sampling draws from the default generator of the
device, as the vendor's does (``exponential_`` with no generator).

The vendor's ``CUDAGraphed`` wrappers inside Mimi and ``LMGen`` are switched off by the caller
(:func:`vendor_graphs_off`); its lazily compiled RMS norm is left as the vendor runs it on CUDA
and switched off on the CPU (the vendor compiles it there too, which takes seconds and changes
nothing but speed).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import Tensor

from engine.contract import SDPA_KERNELS

__all__ = ["FrameOps", "vendor_graphs_off"]


def _backends() -> dict[str, Any]:
    from torch.nn.attention import SDPBackend

    return {
        "math": SDPBackend.MATH,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }


_OFF_LOCK = threading.Lock()
_off: list[ExitStack] = []  # the one live switch, while any thread is inside
_off_depth = 0


@contextmanager
def vendor_graphs_off(device: torch.device) -> Iterator[None]:
    """The vendor's ``CUDAGraphed`` off (``no_cuda_graph``) and, on the CPU, its compile off.

    The vendor's switches are process-wide flags each restored on exit; sessions stepping on
    several threads (``engine.multiplex`` lanes) would restore them under one another, so the
    first thread in turns them off and the last one out turns them back."""
    from moshi.utils.compile import no_compile, no_cuda_graph

    global _off_depth
    with _OFF_LOCK:
        if _off_depth == 0:
            stack = ExitStack()
            stack.enter_context(no_cuda_graph())
            if device.type != "cuda":
                stack.enter_context(no_compile())
            _off.append(stack)
        _off_depth += 1
    try:
        yield
    finally:
        with _OFF_LOCK:
            _off_depth -= 1
            if _off_depth == 0:
                _off.pop().close()


class FrameOps:
    """The four operators of one frame over ``mimi`` and ``lm_gen`` (both streaming, batch 1).

    ``sdpa`` pins the temporal step's attention backend (``default``: torch's choice). The
    depformer must be streaming too (it streams detached from the LM) before the first call.
    """

    def __init__(self, mimi: Any, lm_gen: Any, *, sdpa: str = "default") -> None:
        from moshi.models.lm import scatter_with_mask_
        from moshi.utils.sampling import sample_token

        if sdpa not in SDPA_KERNELS:
            raise ValueError(f"sdpa {sdpa!r}: expected one of {', '.join(SDPA_KERNELS)}")
        self.mimi, self.lm_gen, self.sdpa = mimi, lm_gen, sdpa
        self.lm = lm_gen.lm_model
        self.dep_q: int = self.lm.dep_q
        self.audio_q: int = mimi.num_codebooks  # codebooks Mimi encodes and decodes
        self._scatter, self._sample = scatter_with_mask_, sample_token
        self._dep_rings = [
            m._streaming_state.kv_cache.cache
            for m in self.lm.depformer.modules()
            if type(m).__name__ == "StreamingMultiheadAttention"
        ]

    @classmethod
    def own_rings(cls, mimi: Any, lm: Any) -> int:
        """Called once the models stream, before the clocks are shared: a family whose
        reference code keeps its rings otherwise than ``moshi`` gives them its rule here (the
        number of rings changed). Moshi's are ``moshi``'s own: none."""
        return 0

    def _open_depformer(self) -> None:
        """The depformer as the vendor opens it every frame: streaming reset, zeroed rings."""
        self.lm.depformer.reset_streaming()
        for ring in self._dep_rings:
            ring.zero_()

    @property
    def _state(self) -> Any:
        state = self.lm_gen._streaming_state
        assert state is not None, "lm_gen must be streaming: with lm_gen.streaming(1): ..."
        return state

    # -- the four operators -------------------------------------------------------------------

    def encode(self, pcm: Tensor) -> Tensor:
        """Mimi's streaming encode: ``(1, 1, spf)`` float -> ``(1, dep_q, 1)`` int64 codes."""
        codes: Tensor = self.mimi.encode(pcm)
        return codes

    def lm_step(self, codes: Tensor) -> tuple[Tensor, Tensor]:
        """The user's codes in, the temporal step, the text token sampled: ``(text, hidden)``."""
        gen, lm, state = self.lm_gen, self.lm, self._state
        ct = state.cache.shape[2]
        needed = lm.num_codebooks - lm.dep_q - 1
        delays = gen.delays_cuda[lm.dep_q + 1 :]
        write_positions = (state.offsets[:, None, None] + delays[:, None]) % ct
        self._scatter(
            state.cache[:, lm.dep_q + 1 :],
            -1,
            write_positions,
            codes[:, :needed, :],
            state.exec_mask[:, None, None],
        )
        is_init = state.offsets[:, None, None] <= gen.delays_cuda[:, None]
        is_init |= ~state.exec_mask[:, None, None]
        positions = (state.offsets % ct)[:, None, None].expand_as(is_init)
        input_ = state.cache.gather(dim=2, index=positions)
        input_ = torch.where(is_init, state.initial, input_)
        with self._attention():
            hidden, logits = lm.forward_text(input_, state.condition_sum, state.condition_cross)
        text = self._sample(logits.float(), gen.use_sampling, gen.temp_text, gen.top_k_text)
        return text[:, 0, 0], hidden

    def depformer_step(self, text: Tensor, hidden: Tensor) -> Tensor:
        """The codebooks sampled after ``text``, then the delayed frame: ``(1, 1 + dep_q, 1)``."""
        gen, lm, state = self.lm_gen, self.lm, self._state
        self._open_depformer()
        prev, tokens = text, []
        for cb in range(self.dep_q):
            logits = lm.forward_depformer(cb, prev[:, None, None], hidden)
            prev = self._sample(logits.float(), gen.use_sampling, gen.temp, gen.top_k)[:, 0, 0]
            tokens.append(prev)
        audio = torch.stack(tokens, dim=1)[:, :, None]
        ct = state.cache.shape[2]
        mask = state.exec_mask[:, None, None]
        state.offsets.copy_(torch.where(state.exec_mask, state.offsets + 1, state.offsets))
        positions = (state.offsets % ct)[:, None, None]
        self._scatter(state.cache[:, :1], -1, positions, text[:, None, None], mask)
        self._scatter(
            state.cache[:, 1 : self.dep_q + 1, :], -1, positions.expand_as(audio), audio, mask
        )
        delays = gen.delays_cuda[: self.dep_q + 1]
        index = (state.offsets[:, None, None] - gen.max_delay + delays[:, None]) % ct
        out = state.cache.gather(dim=2, index=index)
        unready = (state.offsets <= gen.max_delay) | ~state.exec_mask
        return torch.where(unready[:, None, None], lm.ungenerated_token_id, out)

    def decode(self, tokens: Tensor) -> Tensor:
        """Mimi's streaming decode of the frame's audio codes: ``(1, 1, spf)`` float."""
        pcm: Tensor = self.mimi.decode(tokens[:, 1 : 1 + self.audio_q])
        return pcm

    def reset(self) -> None:
        """A new conversation: state beside the vendor's streaming states (none here)."""

    def state_tensors(self) -> tuple[Tensor, ...]:
        """Tensors the operators write beside the vendor's streaming states (none here)."""
        return ()

    def kept(self) -> tuple[Tensor, ...]:
        """Every tensor a session keeps beside the vendor's streaming states and the frame's
        regions (declared with the positions): what :meth:`state_tensors` writes, and the
        device copy of the delays the vendor's ``LMGen`` makes for itself."""
        return (self.lm_gen.delays_cuda, *self.state_tensors())

    def _attention(self) -> Any:
        if self.sdpa == "default":
            return ExitStack()
        from torch.nn.attention import sdpa_kernel

        return sdpa_kernel([_backends()[self.sdpa]])

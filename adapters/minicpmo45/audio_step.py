"""The audio encoder on one unit of audio over its KV carry, on the vendor's own modules.

MiniCPM-o 4.5 hears through a Whisper encoder (``model.apm``, the checkpoint's
``MiniCPMWhisperEncoder``) run in streaming form: per 1-s unit, ``get_audio_embedding_streaming``
calls it on the unit's mel frames with a growing ``EncoderDecoderCache`` of every earlier unit's
keys and values (full attention over them, no mask but zeros), then projects and pools its
output; when the cache would pass the encoder's position table (``max_source_positions``,
30 s) the vendor drops it and starts again.

:class:`AudioStep` is that forward with its keys and values in a
:class:`~adapters.minicpmo45.kv.KVCarry` at one address (the state rule): the two
convolutions and their GELUs, the vendor's cut of the extra context frames (``prefix`` /
``suffix``, host integers: part of the signature), the position embedding gathered at
``slots``, then per layer the vendor's norms, projections and MLP, with attention over the
carry's first ``extent`` slots (the least of the carry's ladder that holds them all:
:meth:`~.kv.KVCarry.extent`) under a boolean mask ``slot <= slots[-1]`` (every live slot: the
vendor's full attention), and the final norm. So a unit's call has fixed shapes (the mel
frames, the cut, the carry, the extent) and is one exact signature per extent (operator
``audio.step``); the price
against the vendor's forward is the LLM's (``llm_step.py``): attending masked slots changes the
reduction's blocking, about one ulp.

Capturable once its shapes are fixed: no host reads, no allocation outside the caching
allocator.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from adapters.minicpmo45.llm_step import sdpa_backend

__all__ = ["AudioStep", "cut_frames"]


def cut_frames(extra: int) -> int:
    """Encoder frames the vendor cuts for ``extra`` mel frames of context (``conv2``'s stride
    2: ``ceil(extra / 2)``, none for none)."""
    return (extra + 1) // 2 if extra > 0 else 0


class AudioStep:
    """The streaming forward of ``apm`` (a Whisper encoder: ``conv1``, ``conv2``,
    ``embed_positions``, ``layers``, ``layer_norm``) over a carry of ``capacity`` slots.

    Args:
        apm: the vendor's audio encoder (its modules and weights are used as they are).
        capacity: the carry's slots (the attended extent of every call).
        backend: the pinned SDPA backend (``llm_step.BACKENDS``).
    """

    def __init__(self, apm: nn.Module, capacity: int, backend: str) -> None:
        self.apm, self.capacity, self.backend = apm, capacity, backend
        core: Any = apm
        self.layers: Any = core.layers
        attn = self.layers[0].self_attn
        self.heads, self.head_dim = int(attn.num_heads), int(attn.head_dim)
        self.cols = torch.arange(capacity, device=core.conv1.weight.device)

    def carry_shape(self) -> tuple[int, int, int, int, int]:
        """``[layers, 2, heads, capacity, head_dim]``."""
        return (len(self.layers), 2, self.heads, self.capacity, self.head_dim)

    def frames(self, mel_frames: int, prefix: int, suffix: int) -> int:
        """The encoder frames a unit of ``mel_frames`` adds to the carry (the vendor's count)."""
        return (mel_frames - 1) // 2 + 1 - cut_frames(prefix) - cut_frames(suffix)

    def hidden(
        self, mel: Tensor, slots: Tensor, buffer: Tensor, prefix: int, suffix: int, extent: int
    ) -> Tensor:
        """The encoder on ``mel [1, n_mels, frames]`` writing ``slots [n]`` of ``buffer`` and
        attending its first ``extent`` slots: the final norm's output ``[1, n, d_model]`` (the
        vendor's ``hidden_states[-1]``)."""
        core: Any = self.apm
        x = mel.to(dtype=core.conv1.weight.dtype)
        x = F.gelu(core.conv1(x))
        x = F.gelu(core.conv2(x))
        head, tail = cut_frames(prefix), cut_frames(suffix)
        if head > 0:
            x = x[:, :, head:]
        if 0 < tail < x.shape[2]:
            x = x[:, :, :-tail]
        h = x.permute(0, 2, 1) + core.embed_positions.weight.index_select(0, slots)
        n = h.shape[1]
        mask = (self.cols[:extent] <= slots[-1]).view(1, 1, 1, extent).expand(1, 1, n, -1)
        with sdpa_backend(self.backend):
            for i, layer in enumerate(self.layers):
                residual = h
                h = layer.self_attn_layer_norm(h)
                kv = buffer[i, :, :, :extent]
                h = residual + self._attention(layer.self_attn, h, slots, mask, kv, buffer[i], n)
                residual = h
                h = layer.final_layer_norm(h)
                h = layer.fc2(layer.activation_fn(layer.fc1(h)))
                h = residual + h
        out: Tensor = core.layer_norm(h)
        return out

    def _attention(
        self, attn: Any, h: Tensor, slots: Tensor, mask: Tensor, kv: Tensor, carry: Tensor, n: int
    ) -> Tensor:
        shape = (1, n, self.heads, self.head_dim)
        q = (attn.q_proj(h) * attn.scaling).view(shape).transpose(1, 2)
        k = attn.k_proj(h).view(shape).transpose(1, 2)
        v = attn.v_proj(h).view(shape).transpose(1, 2)
        carry[0].index_copy_(1, slots, k[0])
        carry[1].index_copy_(1, slots, v[0])
        out = F.scaled_dot_product_attention(
            q, kv[0].unsqueeze(0), kv[1].unsqueeze(0), attn_mask=mask, scale=1.0
        )
        result: Tensor = attn.out_proj(out.transpose(1, 2).reshape(1, n, -1))
        return result

"""A stand-in for MiniCPM-o 4.5's streaming audio encoder (no vendor code in CI).

The modules are transformers' own ``WhisperEncoder`` (``conv1``, ``conv2``, ``embed_positions``,
``layers`` of ``self_attn`` / ``self_attn_layer_norm`` / ``fc1`` / ``fc2`` /
``final_layer_norm``, ``layer_norm``), as the checkpoint's ``MiniCPMWhisperEncoder`` subclasses
them; its ``forward`` and the model's ``get_audio_embedding_streaming`` are restated from the
public code (OpenBMB/MiniCPM-o-Demo ``MiniCPMO45/modeling_minicpmo.py``): the two convolutions,
the cut of the extra context frames, positions from the cache's length, attention over the
cache and the unit (the eager attention), the final norm; the cache dropped before it would
pass the position table, the projection and the pooling after it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class StandInWhisper(nn.Module):
    """The checkpoint's ``MiniCPMWhisperEncoder``: transformers' ``WhisperEncoder`` modules
    (tiny, seeded; 2 layers, 4 heads) with the vendor's streaming ``forward``."""

    def __init__(self, mels: int = 16, width: int = 32, positions: int = 160) -> None:
        import transformers

        super().__init__()
        self.config = transformers.WhisperConfig(
            num_mel_bins=mels, d_model=width, encoder_layers=2, encoder_attention_heads=4,
            encoder_ffn_dim=2 * width, max_source_positions=positions,
        )  # fmt: skip
        encoder = transformers.models.whisper.modeling_whisper.WhisperEncoder(self.config)
        self.conv1, self.conv2, self.layers = encoder.conv1, encoder.conv2, encoder.layers
        self.embed_positions, self.layer_norm = encoder.embed_positions, encoder.layer_norm
        with torch.no_grad():  # transformers fills the table with sinusoids: random here too
            self.embed_positions.weight.normal_()
        self.eval()

    def forward(self, input_features: Tensor, **kwargs: Any) -> Any:
        return streaming_forward(self, input_features, **kwargs)


def _cut(extra: int) -> int:
    return (extra + 1) // 2 if extra > 0 else 0


def streaming_forward(
    apm: Any,
    input_features: Tensor,
    past_key_values: Any = None,
    use_extra_context: bool | None = False,
    prefix_extra_frames: int | None = 1,
    suffix_extra_frames: int | None = 1,
    **_: Any,
) -> Any:
    """The vendor's ``MiniCPMWhisperEncoder.forward`` with a cache (legacy list form)."""
    x = input_features.to(apm.conv1.weight.dtype)
    x = F.gelu(apm.conv2(F.gelu(apm.conv1(x))))
    if use_extra_context:
        head, tail = _cut(int(prefix_extra_frames or 0)), _cut(int(suffix_extra_frames or 0))
        x = x[:, :, head:] if head > 0 else x
        x = x[:, :, :-tail] if 0 < tail < x.shape[2] else x
    h = x.permute(0, 2, 1)
    past = list(past_key_values or [])
    start = int(past[0][0].shape[2]) if past else 0
    h = h + apm.embed_positions.weight[start : start + h.shape[1]]
    states, cache = [h], []
    for i, layer in enumerate(apm.layers):
        attn, residual = layer.self_attn, h
        h = layer.self_attn_layer_norm(h)
        split = (1, h.shape[1], attn.num_heads, attn.head_dim)
        q = (attn.q_proj(h) * attn.scaling).view(split).transpose(1, 2)
        k = attn.k_proj(h).view(split).transpose(1, 2)
        v = attn.v_proj(h).view(split).transpose(1, 2)
        if past:
            k, v = torch.cat([past[i][0], k], dim=2), torch.cat([past[i][1], v], dim=2)
        cache.append((k, v))
        w = torch.softmax(q @ k.transpose(2, 3), dim=-1)
        h = residual + attn.out_proj((w @ v).transpose(1, 2).reshape(1, h.shape[1], -1))
        residual = h
        h = residual + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(h))))
        states.append(h)
    h = apm.layer_norm(h)
    states[-1] = h
    return SimpleNamespace(last_hidden_state=h, hidden_states=tuple(states), past_key_values=cache)


class StandInAudioModel:
    """The model's parts the audio rules reach: ``apm`` (its ``forward`` the vendor's
    streaming one), ``audio_past_key_values``, ``audio_encoder_layer`` and
    ``get_audio_embedding_streaming``; the projection and pooling restated."""

    def __init__(self, apm: StandInWhisper, pool: int = 5) -> None:
        self.apm, self.audio_encoder_layer, self.pool = apm, -1, pool
        self.audio_past_key_values: Any = None

    def reset_session(self) -> None:
        self.audio_past_key_values = None

    @torch.no_grad()
    def get_audio_embedding_streaming(
        self, mel: Tensor, prefix: int, suffix: int
    ) -> list[list[Tensor]]:
        """One unit's embeddings (the vendor's, without the batch nesting's bookkeeping)."""
        n = (mel.shape[-1] - 1) // 2 + 1
        table = self.apm.embed_positions.weight.shape[0]
        past = self.audio_past_key_values
        if past is not None and past[0][0].shape[2] + n >= table:
            self.audio_past_key_values = None  # the vendor's reset at the table's end
        out = self.apm(
            mel, past_key_values=self.audio_past_key_values, use_cache=True,
            output_hidden_states=True, attention_mask=None, use_extra_context=True,
            prefix_extra_frames=prefix, suffix_extra_frames=suffix,
        )  # fmt: skip
        states = out.hidden_states[self.audio_encoder_layer]
        self.audio_past_key_values = out.past_key_values
        pooled = F.avg_pool1d(states.transpose(1, 2), self.pool, self.pool).transpose(1, 2)
        return [[pooled[0]]]

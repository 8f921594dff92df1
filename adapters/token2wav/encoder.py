"""``UpsampleConformerEncoderV2``: speech tokens (25 Hz) to mel-rate hidden states (50 Hz).

Layout: linear input layer → pre-lookahead convolution (each token sees 3 future tokens) →
``num_blocks`` conformer blocks at token rate → nearest ×2 upsample + causal conv → linear input
layer → ``num_up_blocks`` blocks at mel rate → final LayerNorm.

Streaming caches (the vendor's layouts, explicit inputs and outputs, no hidden state):

* ``cnn_cache [b, c, 2 + 2·stride]``: the pre-lookahead conv2's 2 left-context frames, then the
  upsample conv's ``2·stride`` left-context frames.
* ``att_cache [num_blocks + num_up_blocks, b, heads, 2·t, 2·d_k]``, oldest frame first. The
  mel-rate blocks' caches hold ``2·t`` frames; the token-rate blocks' caches hold ``t`` frames,
  packed twice (``[cache ‖ cache]``) so both fit one tensor. Only the first half of a token-rate
  row is read back.

Inference only: no masks (the vendor streams unmasked), dropout is the identity. The vendor wraps
``forward_chunk`` in ``torch.compile(backend="eager")`` and changes global dynamo settings; we run
the same operations as plain code.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from adapters.token2wav.config import EncoderConfig
from adapters.token2wav.conformer import (
    ConformerLayer,
    relative_position_table,
    relative_positions,
)


class LinearInput(nn.Module):
    """``Linear → LayerNorm``, then the positional module's ``x·√d`` scaling (names ``out.0/1``)."""

    def __init__(self, idim: int, odim: int) -> None:
        super().__init__()
        self.out = nn.Sequential(nn.Linear(idim, odim), nn.LayerNorm(odim, eps=1e-5))
        self.xscale = math.sqrt(odim)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.out(x) * self.xscale
        return out


class PreLookaheadLayer(nn.Module):
    """Conv over each token and its ``pre_lookahead_len`` successors, a causal conv, a residual."""

    def __init__(self, channels: int, pre_lookahead_len: int) -> None:
        super().__init__()
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(channels, channels, kernel_size=pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size=3)

    def forward_chunk(self, inputs: Tensor, cache: Tensor | None) -> tuple[Tensor, Tensor]:
        """``inputs [b, t, c]`` → ``[b, t − lookahead, c]`` and conv2's new 2-frame left context."""
        outputs = F.leaky_relu(self.conv1(inputs.transpose(1, 2).contiguous()))
        if cache is None:
            cache = outputs.new_zeros(outputs.shape[0], outputs.shape[1], 2)
        new_cache = outputs[..., -2:]
        outputs = self.conv2(torch.cat([cache, outputs], dim=2))
        outputs = outputs.transpose(1, 2).contiguous()
        return outputs + inputs[:, : -self.pre_lookahead_len], new_cache


class Upsample1D(nn.Module):
    """Nearest-neighbour ×``scale_factor`` then a causal conv of kernel ``2·stride + 1``."""

    def __init__(self, channels: int, out_channels: int, stride: int, scale_factor: float) -> None:
        super().__init__()
        self.stride = stride
        self.scale_factor = float(scale_factor)
        self.conv = nn.Conv1d(channels, out_channels, stride * 2 + 1)

    def forward_chunk(self, inputs: Tensor, cache: Tensor | None) -> tuple[Tensor, Tensor]:
        """``inputs [b, c, t]`` → ``[b, c, stride·t]`` and the conv's new left context."""
        outputs = F.interpolate(inputs, scale_factor=self.scale_factor, mode="nearest")
        if cache is None:
            cache = inputs.new_zeros(inputs.shape[0], inputs.shape[1], self.stride * 2)
        outputs = torch.cat([cache, outputs], dim=2)
        new_cache = outputs[..., -self.stride * 2 :]
        return self.conv(outputs), new_cache


class UpsampleConformerEncoderV2(nn.Module):
    """The flow encoder; see the module docstring for the cache layouts."""

    pos_table: Tensor

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        size = config.output_size
        self._output_size = size
        # Registration order as in the checkpoint.
        self.embed = LinearInput(config.input_size, size)
        self.after_norm = nn.LayerNorm(size, eps=1e-5)
        self.pre_lookahead_layer = PreLookaheadLayer(size, config.pre_lookahead_len)
        self.encoders = nn.ModuleList(
            ConformerLayer(size, config.attention_heads, config.linear_units, config.key_bias)
            for _ in range(config.num_blocks)
        )
        self.up_layer = Upsample1D(size, size, config.up_stride, config.up_scale_factor)
        self.up_embed = LinearInput(config.input_size, size)
        self.up_encoders = nn.ModuleList(
            ConformerLayer(size, config.attention_heads, config.linear_units, config.key_bias)
            for _ in range(config.num_up_blocks)
        )
        # A device-resident constant, not in the checkpoint.
        self.register_buffer("pos_table", relative_position_table(size), persistent=False)

    def output_size(self) -> int:
        return self._output_size

    def forward_chunk(
        self,
        xs: Tensor,
        last_chunk: bool = False,
        cnn_cache: Tensor | None = None,
        att_cache: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Encode one chunk of embedded tokens ``xs [b, t, input_size]``.

        A non-final chunk's last ``pre_lookahead_len`` tokens are lookahead only: the output covers
        ``t − lookahead`` tokens, i.e. ``stride·(t − lookahead)`` mel frames. A final chunk is
        padded with zero lookahead and covers all ``t`` tokens. Returns ``(h [b, frames, size],
        cnn_cache, att_cache)`` in the layouts of the module docstring; ``None`` caches start a
        stream.
        """
        depth = len(self.encoders)
        if cnn_cache is not None:
            assert cnn_cache.shape[2] == 2 + self.up_layer.stride * 2, (
                f"cnn_cache has {cnn_cache.shape[2]} frames; pass the packed cache this encoder "
                f"returned ({2 + self.up_layer.stride * 2} frames)"
            )
        if att_cache is not None:
            assert att_cache.shape[3] % 2 == 0, (
                f"att_cache extent {att_cache.shape[3]} is odd; pass the packed cache this encoder "
                "returned (token-rate half and mel-rate frames)"
            )
        offset = att_cache.shape[3] // 2 if att_cache is not None else 0

        xs = self.embed(xs)
        if last_chunk:
            xs = F.pad(xs, (0, 0, 0, self.pre_lookahead_layer.pre_lookahead_len))
        cnn_cache1 = cnn_cache[:, :, :2] if cnn_cache is not None else None
        xs, new_cnn_cache1 = self.pre_lookahead_layer.forward_chunk(xs, cnn_cache1)

        token_caches = att_cache[:depth, :, :, :offset] if att_cache is not None else None
        xs, new_att_cache1 = self._blocks(self.encoders, xs, offset, token_caches)

        cnn_cache2 = cnn_cache[:, :, 2:] if cnn_cache is not None else None
        xs, new_cnn_cache2 = self.up_layer.forward_chunk(
            xs.transpose(1, 2).contiguous(), cnn_cache2
        )
        xs = self.up_embed(xs.transpose(1, 2).contiguous())

        mel_caches = att_cache[depth:] if att_cache is not None else None
        mel_offset = offset * self.up_layer.stride
        xs, new_att_cache2 = self._blocks(self.up_encoders, xs, mel_offset, mel_caches)
        xs = self.after_norm(xs)

        new_att_cache = torch.cat([new_att_cache1.repeat(1, 1, 1, 2, 1), new_att_cache2], dim=0)
        new_cnn_cache = torch.cat([new_cnn_cache1, new_cnn_cache2], dim=2)
        return xs, new_cnn_cache, new_att_cache

    def _blocks(
        self, layers: nn.ModuleList, xs: Tensor, offset: int, caches: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Run ``layers`` with positions for ``offset + t`` frames; stack their new caches."""
        pos_emb = relative_positions(self.pos_table, offset + xs.shape[1])
        new_caches = []
        for index, layer in enumerate(layers):
            xs, new_cache = layer(xs, pos_emb, caches[index] if caches is not None else None)
            new_caches.append(new_cache)
        return xs, torch.stack(new_caches, dim=0)

"""Conformer pieces of the flow encoder: relative-position attention, feed-forward, one block.

Inference only, streaming only: the encoder always runs its layers without a mask (the vendor
passes an empty ``(0, 0, 0)`` mask in ``forward_chunk``, which takes the unmasked softmax), and
dropout is the identity. Every operation below is the vendor's (CosyVoice2 / ESPnet) in the same
order with the same shapes and strides, because the stock path must equal the vendor bit for bit;
where a line looks redundant (a transpose undone later) it is there to keep the strides the
vendor's matmuls see. Parameter names match the checkpoint (``self_attn.linear_q`` ...).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# The vendor builds its table for 5000 positions at construction; longer would rebuild it.
MAX_POSITIONS = 5000


def relative_position_table(d_model: int, max_len: int = MAX_POSITIONS) -> Tensor:
    """ESPnet relative positional encoding ``[1, 2·max_len − 1, d_model]`` (float32, CPU).

    Row ``max_len − 1`` is relative distance 0; rows before it are positive distances (keys to the
    left of the query), reversed, rows after it negative ones. Computed with the vendor's float32
    CPU arithmetic so the values are identical; move it to the device once as a constant.
    """
    pe_positive = torch.zeros(max_len, d_model)
    pe_negative = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model)
    )
    pe_positive[:, 0::2] = torch.sin(position * div_term)
    pe_positive[:, 1::2] = torch.cos(position * div_term)
    pe_negative[:, 0::2] = torch.sin(-1 * position * div_term)
    pe_negative[:, 1::2] = torch.cos(-1 * position * div_term)
    pe_positive = torch.flip(pe_positive, [0]).unsqueeze(0)
    pe_negative = pe_negative[1:].unsqueeze(0)
    return torch.cat([pe_positive, pe_negative], dim=1)


def relative_positions(table: Tensor, size: int) -> Tensor:
    """The ``2·size − 1`` rows of ``table`` centred on distance 0 (a view, no copy)."""
    centre = table.size(1) // 2
    assert size <= centre + 1, (
        f"attended extent {size} exceeds the positional table ({centre + 1} positions); "
        "trim the conformer cache (prompt + retained frames) before it grows this far"
    )
    return table[:, centre - size + 1 : centre + size]


class RelPositionAttention(nn.Module):
    """Multi-head self-attention with relative positions (Transformer-XL ``u``/``v`` biases).

    ``cache`` is ``[b, heads, t_cache, 2·d_k]`` (keys ‖ values on the last dim, oldest first); the
    new cache appends this chunk's keys and values after it.
    """

    def __init__(self, n_head: int, n_feat: int, key_bias: bool) -> None:
        super().__init__()
        assert n_feat % n_head == 0, f"n_feat {n_feat} must be a multiple of n_head {n_head}"
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat, bias=key_bias)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(self.h, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(self, x: Tensor, pos_emb: Tensor, cache: Tensor | None) -> tuple[Tensor, Tensor]:
        """Attend ``x [b, t, n_feat]`` to ``cache ‖ x``; return the output and the new cache."""
        b = x.size(0)
        q = self.linear_q(x).view(b, -1, self.h, self.d_k)  # (b, t1, h, d_k)
        k = self.linear_k(x).view(b, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(b, -1, self.h, self.d_k).transpose(1, 2)
        if cache is not None and cache.size(0) > 0:
            key_cache, value_cache = torch.split(cache, cache.size(-1) // 2, dim=-1)
            k = torch.cat([key_cache, k], dim=2)
            v = torch.cat([value_cache, v], dim=2)
        new_cache = torch.cat((k, v), dim=-1)

        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)
        q_u = (q + self.pos_bias_u).transpose(1, 2)  # (b, h, t1, d_k)
        q_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_u, k.transpose(-2, -1))
        matrix_bd = torch.matmul(q_v, p.transpose(-2, -1))
        if matrix_ac.shape != matrix_bd.shape:  # shapes only: no host sync
            matrix_bd = rel_shift(matrix_bd)
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, -1, self.h * self.d_k)
        return self.linear_out(out), new_cache


def rel_shift(x: Tensor) -> Tensor:
    """Align ``[b, h, t1, 2·t2 − 1]`` relative scores to ``[b, h, t1, t2]`` absolute keys.

    The pad-and-reshape trick of Transformer-XL, exactly as ESPnet writes it (views of one padded
    copy, then a slice).
    """
    zero_pad = torch.zeros((x.size(0), x.size(1), x.size(2), 1), device=x.device, dtype=x.dtype)
    x_padded = torch.cat([zero_pad, x], dim=-1)
    x_padded = x_padded.view(x.size(0), x.size(1), x.size(3) + 1, x.size(2))
    return x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]


class FeedForward(nn.Module):
    """Position-wise ``w_2(swish(w_1(x)))``."""

    def __init__(self, idim: int, hidden_units: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(idim, hidden_units)
        self.w_2 = nn.Linear(hidden_units, idim)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.w_2(F.silu(self.w_1(x)))
        return out


class ConformerLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + ff(norm(x))``.

    The released encoder has no macaron feed-forward and no convolution module, so the vendor's
    feed-forward scale is 1.0 (multiplying by it is exact, so it is omitted) and there is no final
    norm.
    """

    def __init__(self, size: int, heads: int, linear_units: int, key_bias: bool) -> None:
        super().__init__()
        # Registration order as in the checkpoint.
        self.self_attn = RelPositionAttention(heads, size, key_bias)
        self.feed_forward = FeedForward(size, linear_units)
        self.norm_ff = nn.LayerNorm(size, eps=1e-12)
        self.norm_mha = nn.LayerNorm(size, eps=1e-12)

    def forward(self, x: Tensor, pos_emb: Tensor, cache: Tensor | None) -> tuple[Tensor, Tensor]:
        """One block over ``x [b, t, size]``; returns the output and the new attention cache."""
        x_att, new_cache = self.self_attn(self.norm_mha(x), pos_emb, cache)
        x = x + x_att
        x = x + self.feed_forward(self.norm_ff(x))
        return x, new_cache

"""The DiT velocity estimator of the Token2Wav flow decoder, in its streaming (chunk) form.

Our own implementation of the vendor's ``DiT`` (minicpmo-utils 1.0.7,
``stepaudio2/cosyvoice2/flow/decoder_dit.py``), checkpoint-compatible: parameter names and shapes
are the ``decoder.estimator.*`` keys of ``flow.pt``. Every floating-point operation runs in the
vendor's order, on the vendor's shapes and memory layouts (transposed views included: a matmul or
a SLEEF transcendental may take another path on another stride), so the eager path equals the
vendor's bit for bit. Training code, dropout, masks that are built and then discarded, and the
vendor's CUDA-graph bucket branch (chunk sizes {30, 48, 96}, never hit by 50-frame calls) are
left out.

Caches (the vendor's layouts, ``b`` is the CFG batch of 2):

- conv cache ``(depth, b, 2·hidden, kernel - 1)``: the left context of both causal convolutions of
  each block, first conv's channels first.
- attention cache ``(depth, b, num_heads, t, 2·head_dim)``: keys then values on the last axis, and
  on the frame axis the NEWEST frames FIRST (``cat([k_new, k_cache])``).

Constraints for the replay arms: :meth:`DiT.forward_chunk` has no host syncs and no per-call Python
state; with ``resident=True`` it reads the timestep frequency table from a device buffer instead of
building it on the CPU (same bits), and with ``cnn_out``/``att_out`` it writes the new caches into
caller-owned storage instead of the module's static envelope.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CFG_BATCH = 2
"""Batch of every estimator call: the conditional and the unconditional (CFG) rows."""

ENVELOPE_FRAMES = 1000
"""Frame capacity of the vendor's static attention-cache envelope (an implementation constant)."""

TIME_SCALE = 1000
"""Solver time ``t ∈ [0, 1]`` is scaled by this before the sinusoidal embedding."""


def frequency_table(dim: int = 256, max_period: int = 10000) -> Tensor:
    """The sinusoidal frequency table, float32 on the CPU, built with the vendor's exact ops.

    The stock path rebuilds it on every call and copies it to the device (a pageable host-to-device
    copy: not capturable); :class:`TimestepEmbedder` also keeps it once as a device buffer.
    """
    half = dim // 2
    return torch.exp(-math.log(max_period) * torch.arange(start=0, end=half) / half)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN modulation ``x·(1 + scale) + shift``, in this order (the order sets the rounding)."""
    return x * (1 + scale) + shift


class TimestepEmbedder(nn.Module):
    """Sinusoidal embedding of the solver time followed by a SiLU MLP.

    ``freqs`` is the device-resident copy of :func:`frequency_table` (a non-persistent buffer, so
    it follows ``.to(device)`` and stays out of the checkpoint).
    """

    freqs: Tensor

    def __init__(self, hidden_size: int, frequency_embedding_size: int = 256) -> None:
        super().__init__()
        assert frequency_embedding_size % 2 == 0, (
            "frequency_embedding_size must be even (the vendor's odd-size zero pad is not kept)"
        )
        self.frequency_embedding_size = frequency_embedding_size
        self.mlp = nn.Sequential(
            nn.Linear(frequency_embedding_size, hidden_size),
            nn.SiLU(),
            nn.Linear(hidden_size, hidden_size),
        )
        self.register_buffer("freqs", frequency_table(frequency_embedding_size), persistent=False)

    def forward(self, t: Tensor, *, resident: bool = False) -> Tensor:
        """Embed ``t`` of shape (b,) into (b, hidden); ``resident`` reads the device table."""
        table = self.freqs if resident else frequency_table(self.frequency_embedding_size)
        args = (t * TIME_SCALE)[:, None] * table.to(t)[None]
        embedding: Tensor = self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1))
        return embedding


class Attention(nn.Module):
    """Self-attention with qk LayerNorm, separate q/k/v projections and no positional encoding."""

    def __init__(self, dim: int, num_heads: int, head_dim: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        inner = num_heads * head_dim
        # Three Linear layers, not one fused qkv: fusing changes the GEMM and hence the bits.
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.q_norm = nn.LayerNorm(head_dim)
        self.k_norm = nn.LayerNorm(head_dim)
        self.proj = nn.Linear(inner, dim)

    def _heads(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        return x.reshape(b, t, self.num_heads, c // self.num_heads).transpose(1, 2)

    def forward_chunk(self, x: Tensor, att_cache: Tensor | None) -> tuple[Tensor, Tensor]:
        """Attend ``x`` (b, t, dim) over itself and ``att_cache`` (b, nh, past, 2·hd), no mask.

        Returns the output and the new cache (b, nh, t + past, 2·hd), new frames first.
        """
        b, t, _ = x.shape
        q = self.q_norm(self._heads(self.to_q(x)))
        k = self.k_norm(self._heads(self.to_k(x)))
        v = self._heads(self.to_v(x))
        if att_cache is not None:
            k_cache, v_cache = att_cache.chunk(2, dim=3)
            k = torch.cat([k, k_cache], dim=2)
            v = torch.cat([v, v_cache], dim=2)
        new_cache = torch.cat([k, v], dim=3)
        out = F.scaled_dot_product_attention(q, k, v)
        projected: Tensor = self.proj(out.transpose(1, 2).reshape(b, t, -1))
        return projected, new_cache


class CausalConv1d(nn.Conv1d):
    """A Conv1d whose left context comes from a cache instead of padding."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size)
        self.context = kernel_size - 1

    def forward_chunk(self, x: Tensor, cache: Tensor | None) -> tuple[Tensor, Tensor]:
        """Convolve ``x`` (b, c, t) after ``cache`` (b, c, kernel - 1); zeros when ``None``."""
        if cache is None:
            cache = x.new_zeros((x.shape[0], self.in_channels, self.context))
        x = torch.cat([cache, x], dim=2)
        return super().forward(x), x[..., -self.context :]


class CausalConvBlock(nn.Module):
    """Causal conv → LayerNorm → Mish → causal conv, on (b, t, c) activations.

    The submodules are named ``block.1``, ``block.3``, ``block.6``: the checkpoint keeps the
    indices of the vendor's ``Sequential`` (whose other entries are transposes and the Mish).
    """

    def __init__(self, channels: int, kernel_size: int = 3) -> None:
        super().__init__()
        self.channels = channels
        self.block = nn.ModuleDict(
            {
                "1": CausalConv1d(channels, channels, kernel_size),
                "3": nn.LayerNorm(channels),
                "6": CausalConv1d(channels, channels, kernel_size),
            }
        )

    def _conv(self, index: str) -> CausalConv1d:
        conv = self.block[index]
        assert isinstance(conv, CausalConv1d), f"block.{index} must be a CausalConv1d"
        return conv

    def forward_chunk(self, x: Tensor, cache: Tensor | None) -> tuple[Tensor, Tensor]:
        """Run ``x`` (b, t, c) with ``cache`` (b, 2c, kernel - 1); return output and new cache."""
        first, second = (None, None) if cache is None else torch.split(cache, self.channels, dim=1)
        h, new_first = self._conv("1").forward_chunk(x.transpose(1, 2), first)
        h = F.mish(self.block["3"](h.transpose(1, 2)))
        h, new_second = self._conv("6").forward_chunk(h.transpose(1, 2), second)
        return h.transpose(1, 2), torch.cat((new_first, new_second), dim=1)


class Mlp(nn.Module):
    """Linear → tanh-GELU → Linear (the vendor's dropouts and identity norm are no-ops)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.fc2(F.gelu(self.fc1(x), approximate="tanh"))
        return out


class DiTBlock(nn.Module):
    """adaLN-zero block: attention, then causal conv, then MLP, each gated by the time embedding."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads, head_dim)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(hidden_size, int(hidden_size * mlp_ratio))
        self.norm3 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.conv = CausalConvBlock(hidden_size, kernel_size=3)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 9 * hidden_size))

    def forward_chunk(
        self, x: Tensor, c: Tensor, cnn_cache: Tensor | None, att_cache: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Advance ``x`` (b, t, hidden) under time embedding ``c`` (b, 1, hidden).

        Returns ``(x, new_cnn_cache (b, 2·hidden, 2), new_att_cache (b, nh, t + past, 2·hd))``.
        """
        (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp,
         shift_conv, scale_conv, gate_conv) = self.adaLN_modulation(c).chunk(9, dim=-1)  # fmt: skip
        x_att, new_att_cache = self.attn.forward_chunk(
            modulate(self.norm1(x), shift_msa, scale_msa), att_cache
        )
        x = x + gate_msa * x_att
        x_conv, new_cnn_cache = self.conv.forward_chunk(
            modulate(self.norm3(x), shift_conv, scale_conv), cnn_cache
        )
        x = x + gate_conv * x_conv
        x = x + gate_mlp * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x, new_cnn_cache, new_att_cache


class FinalLayer(nn.Module):
    """adaLN-modulated LayerNorm and the projection to mel channels."""

    def __init__(self, hidden_size: int, out_channels: int) -> None:
        super().__init__()
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size))
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, out_channels)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        out: Tensor = self.linear(modulate(self.norm_final(x), shift, scale))
        return out


class DiT(nn.Module):
    """The velocity estimator ``v(x, mu, t, spks, cond)`` of the flow decoder.

    Constructor arguments are flow.yaml's ``decoder.estimator`` fields; the defaults are the
    MiniCPM-o 4.5 / Step-Audio2 values (the vendor's class defaults differ). ``envelope_frames``
    sizes the static cache envelope the stock path writes into (the vendor's
    ``(depth, 2, nh, 1000, 2·hd)`` and ``(depth, 2, 2·hidden, 2)`` buffers); ``None`` builds no
    envelope, and every call must then pass ``cnn_out`` and ``att_out``.
    """

    cnn_cache_buffer: Tensor | None
    att_cache_buffer: Tensor | None

    def __init__(
        self,
        in_channels: int = 320,
        out_channels: int = 80,
        mlp_ratio: float = 4.0,
        depth: int = 16,
        num_heads: int = 8,
        head_dim: int = 64,
        hidden_size: int = 512,
        *,
        envelope_frames: int | None = ENVELOPE_FRAMES,
    ) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.hidden_size = hidden_size
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.in_proj = nn.Linear(in_channels, hidden_size)
        self.blocks = nn.ModuleList(
            DiTBlock(hidden_size, num_heads, head_dim, mlp_ratio) for _ in range(depth)
        )
        self.final_layer = FinalLayer(hidden_size, out_channels)
        self.envelope_frames = envelope_frames
        cnn, att = None, None
        if envelope_frames is not None:
            cnn = torch.zeros(self.cnn_cache_shape(CFG_BATCH))
            att = torch.zeros(self.att_cache_shape(CFG_BATCH, envelope_frames))
        self.register_buffer("cnn_cache_buffer", cnn, persistent=False)
        self.register_buffer("att_cache_buffer", att, persistent=False)

    @property
    def depth(self) -> int:
        return len(self.blocks)

    def cnn_cache_shape(self, batch: int) -> tuple[int, int, int, int]:
        """Shape of the conv cache for ``batch`` rows: (depth, b, 2·hidden, kernel - 1)."""
        return (self.depth, batch, 2 * self.hidden_size, 2)

    def att_cache_shape(self, batch: int, frames: int) -> tuple[int, int, int, int, int]:
        """Shape of the attention cache over ``frames``: (depth, b, nh, frames, 2·hd)."""
        return (self.depth, batch, self.num_heads, frames, 2 * self.head_dim)

    def forward_chunk(
        self,
        x: Tensor,
        mu: Tensor,
        t: Tensor,
        spks: Tensor,
        cond: Tensor,
        cnn_cache: Tensor | None = None,
        att_cache: Tensor | None = None,
        *,
        resident: bool = False,
        cnn_out: Tensor | None = None,
        att_out: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Velocity for one chunk: ``x``, ``mu``, ``cond`` (b, 80, f), ``t`` (b,), ``spks`` (b, 80).

        ``cnn_cache`` (depth, b, 2·hidden, 2) and ``att_cache`` (depth, b, nh, past, 2·hd) are read
        only. The new caches are written into ``cnn_out`` and ``att_out`` (shapes as above with
        ``past + f`` frames) or, when those are ``None``, into the static envelope as the vendor
        does; the returned caches ARE that storage, so the next call overwrites them.
        Returns ``(velocity (b, 80, f) as a transposed view, new_cnn_cache, new_att_cache)``.
        """
        c = self.t_embedder(t, resident=resident).unsqueeze(1)
        frames = x.shape[2]
        h = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, frames), cond], dim=1)
        past = 0 if att_cache is None else att_cache.shape[3]
        cnn_out, att_out = self._outputs(x.shape[0], past + frames, cnn_out, att_out)
        h = self.in_proj(h.transpose(1, 2))
        for index, block in enumerate(cast(Iterable[DiTBlock], self.blocks)):
            h, new_cnn, new_att = block.forward_chunk(
                h,
                c,
                None if cnn_cache is None else cnn_cache[index],
                None if att_cache is None else att_cache[index],
            )
            cnn_out[index] = new_cnn
            att_out[index] = new_att
        out: Tensor = self.final_layer(h, c)
        return out.transpose(1, 2), cnn_out, att_out

    def _outputs(
        self, batch: int, extent: int, cnn_out: Tensor | None, att_out: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The storage the new caches go to: the caller's, or views of the static envelope."""
        if cnn_out is None:
            assert self.cnn_cache_buffer is not None, (
                "no envelope (envelope_frames=None): pass cnn_out"
            )
            assert batch == self.cnn_cache_buffer.shape[1], (
                f"the envelope holds the CFG batch of {CFG_BATCH}, got {batch} rows: pass cnn_out"
            )
            cnn_out = self.cnn_cache_buffer
        if att_out is None:
            assert self.att_cache_buffer is not None, (
                "no envelope (envelope_frames=None): pass att_out"
            )
            assert extent <= self.att_cache_buffer.shape[3], (
                f"attended extent {extent} exceeds the {self.att_cache_buffer.shape[3]}-frame "
                "envelope: trim the attention cache (keep prompt + retained history) or pass outs"
            )
            att_out = self.att_cache_buffer[:, :, :, :extent, :]
        return cnn_out, att_out

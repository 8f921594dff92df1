"""``CausalMaskedDiffWithXvec``: tokens + speaker embedding → mel, streamed chunk by chunk.

token embedding → :class:`UpsampleConformerEncoderV2` → ``encoder_proj`` (mu) → the CFM decoder
(engineer B's ``CausalConditionalCFM``: fixed noise, cosine Euler solver, CFG, per-step caches).

The stream's state is four explicit tensors (:data:`CACHE_KEYS`), passed in and returned:
``conformer_cnn_cache`` and ``conformer_att_cache`` (see ``encoder.py``), ``estimator_cnn_cache
(n_time, depth, b, c1 + c2, 2)`` and ``estimator_att_cache (n_time, depth, b, heads, t, 2·d_k)``.
The decoder's returned estimator caches may alias its module buffers (the vendor's do); callers
that keep a stream's state across other calls must copy them out (``stock.py`` does).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from adapters.token2wav.encoder import UpsampleConformerEncoderV2

CACHE_KEYS = (
    "conformer_cnn_cache",
    "conformer_att_cache",
    "estimator_cnn_cache",
    "estimator_att_cache",
)
FlowCache = dict[str, Tensor]


class ChunkDecoder(Protocol):
    """The CFM interface we use: the vendor's ``forward_chunk`` signature and layouts."""

    def forward_chunk(
        self,
        mu: Tensor,
        spks: Tensor,
        cond: Tensor,
        n_timesteps: int = 10,
        temperature: float = 1.0,
        cnn_cache: Tensor | None = None,
        att_cache: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]: ...


class CausalMaskedDiffWithXvec(nn.Module):
    """The flow model; attribute names and shapes match the checkpoint's ``flow.pt``."""

    def __init__(
        self,
        encoder: UpsampleConformerEncoderV2,
        decoder: nn.Module,
        *,
        vocab_size: int,
        input_size: int = 512,
        output_size: int = 80,
        spk_embed_dim: int = 192,
    ) -> None:
        super().__init__()
        self.pre_lookahead_len = encoder.pre_lookahead_layer.pre_lookahead_len
        self.up_rate = encoder.up_layer.stride
        # Registration order as in the checkpoint.
        self.input_embedding = nn.Embedding(vocab_size, input_size)
        self.spk_embed_affine_layer = nn.Linear(spk_embed_dim, output_size)
        self.encoder = encoder
        self.encoder_proj = nn.Linear(encoder.output_size(), output_size)
        self.decoder = decoder

    def _cfm(self) -> ChunkDecoder:
        return self.decoder  # type: ignore[return-value]

    def speaker(self, spk: Tensor) -> Tensor:
        """Project an x-vector ``[b, spk_embed_dim]`` to the decoder's ``[b, output_size]``."""
        projected: Tensor = self.spk_embed_affine_layer(F.normalize(spk, dim=1))
        return projected

    @torch.inference_mode()
    def setup_cache(
        self, token: Tensor, mel: Tensor, spk: Tensor, n_timesteps: int = 10
    ) -> FlowCache:
        """Run the prompt once and return the stream's first state.

        ``token [b, n + lookahead]`` are the prompt tokens followed by ``pre_lookahead_len``
        lookahead tokens; ``mel [b, up_rate·n, 80]`` is the prompt's ground-truth mel (the
        decoder's condition); ``spk [b, 192]`` the speaker embedding.
        """
        expected = (token.shape[1] - self.pre_lookahead_len) * self.up_rate
        assert expected == mel.shape[1], (
            f"prompt mel has {mel.shape[1]} frames but {token.shape[1]} tokens (with "
            f"{self.pre_lookahead_len} lookahead) need {expected}; pad or cut the prompt mel"
        )
        h, conformer_cnn, conformer_att = self.encoder.forward_chunk(
            self.input_embedding(token), False, None, None
        )
        h = self.encoder_proj(h)
        _, estimator_cnn, estimator_att = self._cfm().forward_chunk(
            h.transpose(1, 2).contiguous(),
            self.speaker(spk),
            mel.transpose(1, 2).contiguous(),
            n_timesteps,
            1.0,
            None,
            None,
        )
        return _cache(conformer_cnn, conformer_att, estimator_cnn, estimator_att)

    @torch.inference_mode()
    def inference_chunk(
        self,
        token: Tensor,
        spk: Tensor,
        cache: FlowCache,
        last_chunk: bool = False,
        n_timesteps: int = 10,
    ) -> tuple[Tensor, FlowCache]:
        """Synthesize the mel ``[b, 80, frames]`` of one token chunk and the stream's next state.

        A non-final ``token [b, t]`` ends with ``pre_lookahead_len`` lookahead tokens and yields
        ``up_rate·(t − lookahead)`` frames; a final one yields ``up_rate·t``. The condition of a
        generated chunk is zeros (only the prompt is conditioned on ground truth).
        """
        spk = self.speaker(spk)
        h, conformer_cnn, conformer_att = self.encoder.forward_chunk(
            self.input_embedding(token),
            last_chunk,
            cache["conformer_cnn_cache"],
            cache["conformer_att_cache"],
        )
        h = self.encoder_proj(h)
        cond = h.new_zeros(h.shape)
        feat, estimator_cnn, estimator_att = self._cfm().forward_chunk(
            h.transpose(1, 2).contiguous(),
            spk,
            cond.transpose(1, 2).contiguous(),
            n_timesteps,
            1.0,
            cache["estimator_cnn_cache"],
            cache["estimator_att_cache"],
        )
        return feat, _cache(conformer_cnn, conformer_att, estimator_cnn, estimator_att)


def _cache(
    conformer_cnn: Tensor, conformer_att: Tensor, est_cnn: Tensor, est_att: Tensor
) -> FlowCache:
    return dict(zip(CACHE_KEYS, (conformer_cnn, conformer_att, est_cnn, est_att), strict=True))

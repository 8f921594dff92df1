"""A tiny seeded autoregressive transformer over speech tokens, with a KV cache.

It stands in for a speech model's language side: random weights, so its tokens are *not* speech,
but they come one at a time, each conditioned on the turn's previous ones, at the cost and with
the statefulness of real decoding. Every random number (weights and sampling) comes from
generators the caller owns; the global torch RNG is never touched, so two runs with the same
seeds emit the same tokens whatever else the process draws (the arms must see identical tokens).

Cost: with d=128 and 2 layers one token is ~40 small CPU ops, ~0.2 ms; the cache makes it
independent of the turn's length. Always on the CPU: the tokens are copied to the synthesizer's
device by the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["LMConfig", "TokenLM"]


@dataclass(frozen=True)
class LMConfig:
    """Shape and sampling of the token model.

    Args:
        vocab: speech-token codes (the synthesizer's declared ``vocab``).
        d_model: residual width.
        layers: transformer blocks.
        heads: attention heads (``d_model`` must divide by it).
        max_len: most positions of one turn (BOS + its answer); the cache is this long.
        top_k: sampling keeps the k likeliest tokens.
        temperature: logits are divided by it before sampling.
    """

    vocab: int
    d_model: int = 128
    layers: int = 2
    heads: int = 4
    max_len: int = 256
    top_k: int = 64
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} must be a multiple of heads={self.heads}")
        if not 1 <= self.top_k <= self.vocab or self.temperature <= 0 or self.max_len < 2:
            raise ValueError(
                f"need 1 <= top_k <= vocab, temperature > 0, max_len >= 2; got top_k={self.top_k}, "
                f"vocab={self.vocab}, temperature={self.temperature}, max_len={self.max_len}"
            )


def _weights(config: LMConfig, seed: int) -> dict[str, Tensor]:
    """Every parameter from one seeded generator, in a fixed order (same bits on every run)."""
    g = torch.Generator().manual_seed(seed)
    d, hidden = config.d_model, 4 * config.d_model

    def matrix(rows: int, cols: int, gain: float = 1.0) -> Tensor:
        return torch.randn(rows, cols, generator=g) * (gain / math.sqrt(cols))

    w = {
        # BOS is the extra row ``vocab``; embeddings O(1) like a trained model's.
        "embed": torch.randn(config.vocab + 1, d, generator=g),
        "pos": 0.1 * torch.randn(config.max_len, d, generator=g),
        # Gain 2 on the head: logits of a few units, so top-k sampling is neither flat nor stuck.
        "head": matrix(config.vocab, d, gain=2.0),
    }
    for i in range(config.layers):
        w[f"{i}.qkv"] = matrix(3 * d, d)
        w[f"{i}.out"] = matrix(d, d, gain=0.5)
        w[f"{i}.up"] = matrix(hidden, d)
        w[f"{i}.down"] = matrix(d, hidden, gain=0.5)
    return w


class TokenLM:
    """Samples a turn's tokens one by one: :meth:`start` a turn, then :meth:`sample` any number.

    Args:
        config: shape and sampling.
        seed: the weights' seed.
    """

    def __init__(self, config: LMConfig, seed: int = 0) -> None:
        self.config = c = config
        self.w = _weights(c, seed)
        self.head_dim = c.d_model // c.heads
        cache = (c.layers, c.heads, c.max_len, self.head_dim)
        self.keys, self.values = torch.zeros(cache), torch.zeros(cache)
        self.position = 0
        self._last = c.vocab  # BOS

    @property
    def room(self) -> int:
        """Tokens the current turn can still sample before its cache is full."""
        return self.config.max_len - self.position

    def start(self) -> None:
        """A new turn: an empty context that holds only BOS."""
        self.position, self._last = 0, self.config.vocab

    @torch.inference_mode()
    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` next tokens of the turn, (n,) int64 on the CPU, drawn with ``generator`` only."""
        if n > self.room:
            raise ValueError(
                f"turn would exceed max_len={self.config.max_len} positions ({self.position} used, "
                f"{n} asked): build LMConfig(max_len=...) for the longest answer"
            )
        out = torch.empty(n, dtype=torch.int64)
        for i in range(n):
            logits = self._next_logits(self._last)
            top, index = torch.topk(logits / self.config.temperature, self.config.top_k)
            choice = torch.multinomial(F.softmax(top, dim=-1), 1, generator=generator)
            self._last = int(index[choice])
            out[i] = self._last
        return out

    def _next_logits(self, token: int) -> Tensor:
        """Feed ``token`` at the current position; logits (vocab,) for the next one."""
        c, w, p = self.config, self.w, self.position
        x = w["embed"][token] + w["pos"][p]
        for i in range(c.layers):
            qkv = F.linear(F.layer_norm(x, (c.d_model,)), w[f"{i}.qkv"])
            q, k, v = torch.split(qkv, c.d_model)
            self.keys[i, :, p] = k.view(c.heads, self.head_dim)
            self.values[i, :, p] = v.view(c.heads, self.head_dim)
            att = F.scaled_dot_product_attention(
                q.view(c.heads, 1, self.head_dim),
                self.keys[i, :, : p + 1],
                self.values[i, :, : p + 1],
            )
            x = x + F.linear(att.reshape(c.d_model), w[f"{i}.out"])
            h = F.gelu(F.linear(F.layer_norm(x, (c.d_model,)), w[f"{i}.up"]))
            x = x + F.linear(h, w[f"{i}.down"])
        self.position = p + 1
        return F.linear(F.layer_norm(x, (c.d_model,)), w["head"])

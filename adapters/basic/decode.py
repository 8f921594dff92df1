"""SmolLM2's forward pass and greedy decode, lean: the reply model without ``generate``.

transformers' ``generate`` spends about a third of a token's CPU (~23 of ~60 ms, one thread) in
its own machinery: the dynamic cache's concatenations, the mask, the logits processors, the
kwargs and hooks of 30 decoder layers. :class:`Lean` runs the same model's forward itself, over
the loaded ``LlamaForCausalLM``'s own modules and weights (the embedding, each decoder layer's
norms and projections, 4-bit or float32, the rotary frequencies, the final norm and the output
layer), with the keys and values in a preallocated buffer (:class:`Keys`) that the prompt's
rows fill once, at load, and each turn writes past. Every operation is the one transformers
5.24's ``modeling_llama`` performs, in its order and on tensors of the same shapes and strides
(``LlamaRMSNorm``: float32, ``pow(2).mean``, ``rsqrt(var + eps)``, ``weight * x``; rotary's
cos and sin from the positions; eager attention: ``q @ k^T * scaling``, the causal mask added
only where a pass has more than one row, softmax in float32, ``@ v``; ``silu(gate) * up``), so
the logits are equal bit for bit (``tests/test_basic_decode.py``).

:func:`greedy` is ``generate``'s greedy loop: argmax of each step's logits (after
transformers' repetition penalty when it is not 1.0, computed as its
``RepetitionPenaltyLogitsProcessor`` does), each token handed to the streamer, and the stop
test after every token. One difference: ``generate`` asks its stopping criteria *before* it
hands the token to the streamer, so a reply that the streamer has just ended costs one more
pass there, whose token nobody says; here the stop test follows the streamer, and that pass is
not run (the tokens are ``generate``'s, less that last one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from adapters.basic.fourbit import GROUP, FourBitLinear

__all__ = ["Keys", "Lean", "greedy"]


@dataclass
class Keys:
    """Keys and values of every layer, ``length`` rows filled, room for ``room`` in all."""

    keys: list[torch.Tensor]  # per layer: (1, kv heads, room, head dim)
    values: list[torch.Tensor]
    length: int = 0

    @property
    def room(self) -> int:
        return self.keys[0].shape[2]


def _linear(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module``'s forward without ``nn.Module.__call__``'s hooks (the same operations)."""
    if isinstance(module, FourBitLinear):
        packed, scales, inputs, outputs = (
            module.packed,
            module.scales_and_zeros,
            module.in_features,
            module.out_features,
        )

        def four_bit(x: torch.Tensor) -> torch.Tensor:
            flat = x.reshape(-1, inputs).to(torch.bfloat16).contiguous()
            out = torch._weight_int4pack_mm_for_cpu(flat, packed, GROUP, scales)
            return out.to(x.dtype).reshape(*x.shape[:-1], outputs)

        return four_bit
    if type(module) is nn.Linear and module.bias is None:
        weight = module.weight
        return lambda x: nn.functional.linear(x, weight)
    return module  # anything else (a screened quantization): its own forward


@dataclass
class _Layer:
    norm: torch.Tensor
    q: Callable[[torch.Tensor], torch.Tensor]
    k: Callable[[torch.Tensor], torch.Tensor]
    v: Callable[[torch.Tensor], torch.Tensor]
    o: Callable[[torch.Tensor], torch.Tensor]
    post_norm: torch.Tensor
    gate: Callable[[torch.Tensor], torch.Tensor]
    up: Callable[[torch.Tensor], torch.Tensor]
    down: Callable[[torch.Tensor], torch.Tensor]


class Lean:
    """The forward pass of a loaded ``LlamaForCausalLM`` (eager attention), on :class:`Keys`.

    Reads ``model``'s modules when built: rebuild it after swapping any of them.
    """

    def __init__(self, model: Any) -> None:
        config = model.config
        self.model = model
        base = model.model
        self.embedding = base.embed_tokens
        self.layers = [
            _Layer(
                layer.input_layernorm.weight,
                _linear(layer.self_attn.q_proj),
                _linear(layer.self_attn.k_proj),
                _linear(layer.self_attn.v_proj),
                _linear(layer.self_attn.o_proj),
                layer.post_attention_layernorm.weight,
                _linear(layer.mlp.gate_proj),
                _linear(layer.mlp.up_proj),
                _linear(layer.mlp.down_proj),
            )
            for layer in base.layers[: config.num_hidden_layers]
        ]
        if config.hidden_act != "silu" or config.attention_bias or config.mlp_bias:
            raise ValueError("Lean runs SmolLM2's layout: SiLU, no biases")
        if config._attn_implementation != "eager":
            raise ValueError("Lean equals the eager attention only: load with it")
        if base.rotary_emb.rope_type in ("dynamic", "longrope"):  # they move with the length
            raise ValueError("Lean computes fixed rotary frequencies only")
        first = base.layers[0]
        self.eps = first.input_layernorm.variance_epsilon
        self.head_dim = first.self_attn.head_dim
        self.groups = first.self_attn.num_key_value_groups
        self.scaling = first.self_attn.scaling
        self.kv_heads = config.num_key_value_heads
        self.final_norm = base.norm
        self.rotary = base.rotary_emb
        self.head = _linear(model.lm_head)
        self.passes = 0  # forward passes run (a prefill, then one a token)

    def keys(self, room: int) -> Keys:
        """Empty keys and values with room for ``room`` positions."""
        weight = self.embedding.weight
        shape = (1, self.kv_heads, room, self.head_dim)

        def zeros() -> torch.Tensor:
            return torch.zeros(shape, dtype=weight.dtype, device=weight.device)

        return Keys([zeros() for _ in self.layers], [zeros() for _ in self.layers])

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return weight * x.to(dtype)

    def _rotary(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(x.shape[1], device=x.device) + start
        inv_freq = self.rotary.inv_freq.to(device=x.device, dtype=torch.float)
        freqs = positions[None, :, None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        scaling = self.rotary.attention_scaling
        cos, sin = emb.cos() * scaling, emb.sin() * scaling
        return cos.to(dtype=x.dtype).unsqueeze(1), sin.to(dtype=x.dtype).unsqueeze(1)

    def _repeat(self, x: torch.Tensor) -> torch.Tensor:
        if self.groups == 1:
            return x
        batch, heads, length, dim = x.shape
        wide = x[:, :, None, :, :].expand(batch, heads, self.groups, length, dim)
        return wide.reshape(batch, heads * self.groups, length, dim)

    def forward(self, ids: torch.Tensor, cache: Keys, logits: bool = True) -> torch.Tensor | None:
        """Run ``ids`` (1, L) at the positions after ``cache``'s rows, adding theirs to it.

        Returns the last position's logits (1, 1, vocabulary), or None when not ``logits``.
        """
        start, rows = cache.length, ids.shape[1]
        end = start + rows
        if end > cache.room:
            raise ValueError(f"{end} positions: the keys have room for {cache.room}")
        self.passes += 1
        x = self.embedding(ids)
        cos, sin = self._rotary(x, start)
        mask = None
        if rows > 1:  # as transformers' eager mask: 0 where seen, the dtype's minimum where not
            seen = (
                torch.arange(end, device=x.device)
                <= torch.arange(start, end, device=x.device)[:, None]
            )
            low = torch.finfo(x.dtype).min
            mask = torch.where(seen, 0.0, low).to(x.dtype)[None, None]
        shape = (1, rows, -1, self.head_dim)
        half = self.head_dim // 2
        for layer, keys, values in zip(self.layers, cache.keys, cache.values, strict=True):
            residual = x
            h = self._norm(x, layer.norm)
            q = layer.q(h).view(shape).transpose(1, 2)
            k = layer.k(h).view(shape).transpose(1, 2)
            v = layer.v(h).view(shape).transpose(1, 2)
            q = (q * cos) + (torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin)
            k = (k * cos) + (torch.cat((-k[..., half:], k[..., :half]), dim=-1) * sin)
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
            weights = torch.matmul(q, self._repeat(keys[:, :, :end]).transpose(2, 3)) * self.scaling
            if mask is not None:
                weights = weights + mask
            weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(weights, self._repeat(values[:, :, :end])).transpose(1, 2)
            out = out.contiguous().reshape(1, rows, -1).contiguous()
            x = residual + layer.o(out)
            residual = x
            h = self._norm(x, layer.post_norm)
            x = residual + layer.down(nn.functional.silu(layer.gate(h)) * layer.up(h))
        cache.length = end
        if not logits:
            return None
        x = self._norm(x, self.final_norm.weight)
        return self.head(x[:, -1:, :])


def _penalized(scores: torch.Tensor, ids: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' ``RepetitionPenaltyLogitsProcessor`` on ``scores`` (1, vocabulary)."""
    score = torch.gather(scores, 1, ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(1, ids, score)


def greedy(
    lean: Lean,
    ids: torch.Tensor,
    cache: Keys,
    max_new_tokens: int,
    put: Callable[[torch.Tensor], None],
    stop: Callable[[], bool],
    eos: frozenset[int],
    repetition_penalty: float = 1.0,
    step_logits: list[torch.Tensor] | None = None,
) -> list[int]:
    """Greedy tokens after ``ids`` (1, L), whose first ``cache.length`` are in ``cache``.

    Each token goes to ``put`` (a (1,) tensor on the CPU, as ``generate`` streams it); the loop
    ends at an end-of-sequence token, after ``max_new_tokens``, or once ``stop()`` says so
    (asked after every token). ``step_logits`` collects each step's float32 logits.
    """
    tokens: list[int] = []
    sequence = ids
    logits = lean.forward(ids[:, cache.length :], cache)
    while True:
        assert logits is not None
        scores = logits[:, -1].to(copy=True, dtype=torch.float32)
        if step_logits is not None:
            step_logits.append(scores)
        if repetition_penalty != 1.0:
            scores = _penalized(scores, sequence, repetition_penalty)
        token = torch.argmax(scores, dim=-1)
        tokens.append(int(token))
        put(token.cpu())
        if tokens[-1] in eos or len(tokens) >= max_new_tokens or stop():
            return tokens
        if repetition_penalty != 1.0:
            sequence = torch.cat([sequence, token[:, None]], dim=-1)
        logits = lean.forward(token[:, None], cache)

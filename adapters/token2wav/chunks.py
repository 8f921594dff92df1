"""The flow chunk under the two state disciplines, as functions of explicit tensors.

Both run exactly the stock operations in the stock order (token embedding → encoder → ``mu`` →
``n`` Euler steps of the DiT with CFG → mel), so they equal the vendor bit for bit; they differ in
where the estimator's per-step caches live:

- :func:`stock_chunk` — the stock discipline: every step writes into the CFM's static envelope
  (16 slots × 1000 frames), the caller gets fresh trimmed copies back (``torch.cat``).
- :func:`carry_chunk` — the state rule: every step writes its new cache straight back into its
  slot of a demand-sized region (``n_steps × (P + retained + call)`` frames) held as a carry, and
  the conv caches into a region of ``n_steps`` slots. Retention is applied afterwards, in place,
  by :meth:`engine.carry.Carry.settle` (outside any replayed graph: it is Python bookkeeping).

Neither function syncs with the host or copies from it: the timestep table is read from its
device-resident copy (``resident=True``, same bits as the stock per-call rebuild), so both can be
captured whole (chunk granularity) and both take their solver step as an argument (step
granularity: a replayed step operator drops in).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from adapters.token2wav.binding import FlowBinding
from adapters.token2wav.cfm import CausalConditionalCFM, cosine_schedule, euler_times
from adapters.token2wav.flow import CausalMaskedDiffWithXvec, FlowCache
from adapters.token2wav.stock import trim_conformer_cache


class StepFn(Protocol):
    """One Euler step (``CausalConditionalCFM.step``'s positional form), maybe a replayed one."""

    def __call__(
        self,
        k: int,
        x: Tensor,
        t: Tensor,
        dt: Tensor,
        mu_in: Tensor,
        spks_in: Tensor,
        cond_in: Tensor,
    ) -> Tensor: ...


def encode(
    flow: CausalMaskedDiffWithXvec,
    tokens: Tensor,
    last_chunk: bool,
    conformer_cnn: Tensor | None,
    conformer_att: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The encoder half of ``inference_chunk``: ``(mu (1, 80, f), new conv, new att cache)``."""
    h, cnn, att = flow.encoder.forward_chunk(
        flow.input_embedding(tokens), last_chunk, conformer_cnn, conformer_att
    )
    return flow.encoder_proj(h).transpose(1, 2).contiguous(), cnn, att


def solve(
    cfm: CausalConditionalCFM,
    mu: Tensor,
    spk: Tensor,
    offset: int,
    n_steps: int,
    step: StepFn,
    cond: Tensor | None = None,
) -> Tensor:
    """The Euler loop of ``forward_chunk`` with the step supplied; noise sliced at ``offset``.

    ``cond`` is zeros for generated chunks (only the prompt is conditioned on its mel).
    """
    x = cfm.rand_noise[:, :, offset : offset + mu.shape[2]] * 1.0
    cond = mu.new_zeros(mu.shape) if cond is None else cond
    mu_in, spks_in, cond_in = cfm.cfg_inputs(mu, spk, cond)
    times = euler_times(cosine_schedule(n_steps, mu.device, mu.dtype))
    for k, (t, dt) in enumerate(times):
        # One layout for every step's input (an elementwise update may return the velocity's
        # transposed layout): the values are the same, and a step's signature stays fixed.
        x = step(k, x.contiguous(), t, dt, mu_in, spks_in, cond_in)
    return x


def stock_chunk(
    flow: CausalMaskedDiffWithXvec,
    spk: Tensor,
    state: FlowCache,
    tokens: Tensor,
    last_chunk: bool,
    binding: FlowBinding,
    step: Callable[..., tuple[Tensor, Tensor, Tensor]] | None = None,
) -> tuple[Tensor, FlowCache]:
    """One chunk over the stock state: ``(mel, next state)``; the state's tensors are fresh.

    ``step(x, t, dt, mu_in, spks_in, cond_in, cnn_k, att_k) -> (x_next, new_cnn, new_att)``
    defaults to the CFM's own step; the new caches go into the static envelope, as the vendor's.
    """
    cfm: CausalConditionalCFM = flow.decoder  # type: ignore[assignment]
    mu, conformer_cnn, conformer_att = encode(
        flow, tokens, last_chunk, state["conformer_cnn_cache"], state["conformer_att_cache"]
    )
    att, cnn = state["estimator_att_cache"], state["estimator_cnn_cache"]
    axis = binding.carry.dim  # the clock axis; slot axis 0 is the solver step
    extent = att.shape[axis] + mu.shape[2]
    run = step or (lambda *a: cfm.step(*a, resident=True))

    def envelope_step(
        k: int, x: Tensor, t: Tensor, dt: Tensor, mu_in: Tensor, spks_in: Tensor, cond_in: Tensor
    ) -> Tensor:
        x, new_cnn, new_att = run(x, t, dt, mu_in, spks_in, cond_in, cnn[k], att[k])
        cfm.cnn_cache_buffer[k] = new_cnn
        cfm.att_cache_buffer[k].narrow(axis - 1, 0, extent).copy_(new_att)
        return x

    mel = solve(cfm, mu, flow.speaker(spk), att.shape[axis], binding.n_steps, envelope_step)
    depth = len(flow.encoder.encoders)
    untrimmed = cfm.att_cache_buffer.narrow(axis, 0, extent)
    att = binding.carry.apply(untrimmed)
    return mel, {
        "conformer_cnn_cache": conformer_cnn,
        "conformer_att_cache": trim_conformer_cache(conformer_att, binding.conformer, depth),
        # The envelope is overwritten by the next call: the state must own its tensors.
        "estimator_cnn_cache": cfm.cnn_cache_buffer.clone(),
        "estimator_att_cache": att.clone() if att is untrimmed else att,
    }


def carry_chunk(
    flow: CausalMaskedDiffWithXvec,
    spk: Tensor,
    conformer: FlowCache,
    att_buffer: Tensor,
    att_view: Tensor,
    cnn_region: Tensor,
    tokens: Tensor,
    last_chunk: bool,
    binding: FlowBinding,
    step: StepFn | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One chunk under the state rule: ``(mel, conformer cnn, trimmed conformer att)``.

    ``att_view`` is the carry's live view (``n_steps`` slots × extent ``e``), ``att_buffer`` its
    whole buffer; step ``k`` reads ``att_view[k]`` and writes ``cat([new, old])`` (``e + f``
    frames) back over ``att_buffer[k]``, and its conv cache over ``cnn_region[k]`` — each layer
    writes only after it has read. The caller then settles the carry at ``e + f`` frames.
    """
    cfm: CausalConditionalCFM = flow.decoder  # type: ignore[assignment]
    mu, conformer_cnn, conformer_att = encode(
        flow, tokens, last_chunk, conformer["conformer_cnn_cache"], conformer["conformer_att_cache"]
    )
    extent = att_view.shape[binding.carry.dim]
    run = step or carry_step(cfm, att_buffer, att_view, cnn_region, binding.carry.dim)
    mel = solve(cfm, mu, flow.speaker(spk), extent, att_view.shape[0], run)
    depth = len(flow.encoder.encoders)
    return mel, conformer_cnn, trim_conformer_cache(conformer_att, binding.conformer, depth)


def carry_setup(
    flow: CausalMaskedDiffWithXvec,
    spk: Tensor,
    tokens: Tensor,
    mel: Tensor,
    att_base: Tensor,
    cnn_base: Tensor,
) -> FlowCache:
    """``setup_cache`` without the stock envelope: the prompt-only state, written in place.

    ``tokens [1, n + lookahead]`` and ``mel [1, 2n, 80]`` as for ``setup_cache``; the estimator's
    prompt caches go into ``att_base (n_steps, ..., 2n, 2·hd)`` and ``cnn_base (n_steps, ...)``.
    Returns the conformer caches. Same operations, same bits as the stock set-up.
    """
    cfm: CausalConditionalCFM = flow.decoder  # type: ignore[assignment]
    mu, conformer_cnn, conformer_att = encode(flow, tokens, False, None, None)

    def step(
        k: int, x: Tensor, t: Tensor, dt: Tensor, mu_in: Tensor, spks_in: Tensor, cond_in: Tensor
    ) -> Tensor:
        x_next, _, _ = cfm.step(
            x,
            t,
            dt,
            mu_in,
            spks_in,
            cond_in,
            None,
            None,
            resident=True,
            cnn_out=cnn_base[k],
            att_out=att_base[k],
        )
        return x_next

    cond = mel.transpose(1, 2).contiguous()
    solve(cfm, mu, flow.speaker(spk), 0, att_base.shape[0], step, cond)
    return {"conformer_cnn_cache": conformer_cnn, "conformer_att_cache": conformer_att}


def carry_step(
    cfm: CausalConditionalCFM, att_buffer: Tensor, att_view: Tensor, cnn_region: Tensor, axis: int
) -> StepFn:
    """The solver step of the state rule, reading and writing the regions in place; ``axis`` is
    the carry's clock axis (slot axis 0 is the solver step)."""
    extent = att_view.shape[axis]

    def step(
        k: int, x: Tensor, t: Tensor, dt: Tensor, mu_in: Tensor, spks_in: Tensor, cond_in: Tensor
    ) -> Tensor:
        out = att_buffer[k].narrow(axis - 1, 0, extent + x.shape[2])
        x_next, _, _ = cfm.step(
            x,
            t,
            dt,
            mu_in,
            spks_in,
            cond_in,
            cnn_region[k],
            att_view[k],
            resident=True,
            cnn_out=cnn_region[k],
            att_out=out,
        )
        return x_next

    return step


def envelope_free_state(stock: FlowCache, n_steps: int) -> tuple[Tensor, Tensor]:
    """The stock estimator caches cut to their ``n_steps`` live slots (the rest stay zero)."""
    return stock["estimator_att_cache"][:n_steps], stock["estimator_cnn_cache"][:n_steps]


def pad_slots(region: Tensor, slots: int) -> Tensor:
    """A region's ``n_steps`` slots followed by zero slots up to the stock envelope's count."""
    pad = region.new_zeros((slots - region.shape[0], *region.shape[1:]))
    return torch.cat([region, pad], dim=0)

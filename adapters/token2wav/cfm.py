"""The causal conditional flow-matching decoder (CFM): a fixed-noise Euler solver around the DiT.

Our own implementation of the vendor's ``CausalConditionalCFM`` (minicpmo-utils 1.0.7,
``stepaudio2/cosyvoice2/flow/flow_matching.py``), streaming form, equal to it bit for bit:

- noise is not drawn per call: a fixed buffer ``rand_noise`` (1, 80, 30000) drawn once at
  construction is sliced at ``offset = att_cache.shape[4]`` (the attended extent so far);
- time follows the cosine schedule ``t = 1 - cos(linspace(0, 1, n + 1)·π/2)``, and the Euler
  loop accumulates ``t ← t + dt``, ``dt ← t_span[k + 1] - t`` in the vendor's order;
- each step evaluates the DiT on the CFG batch of 2 (conditional row, zeroed-condition row) and
  combines ``v = (1 + r)·v_cond - r·v_uncond`` with ``r = inference_cfg_rate``;
- step ``k`` reads slot ``k`` of the stacked caches ``cnn_cache (n_time, depth, 2, 2·hidden, 2)``
  and ``att_cache (n_time, depth, 2, nh, t, 2·hd)`` and the stock path writes its new caches into
  slot ``k`` of the static envelope (16 slots × 1000 frames, ≈ 2.1 GB fp32 at full size), then
  returns the whole conv envelope and a view of the attention envelope: the caller's next call
  overwrites what it was given, so a stream's state must be copied out before anything else runs
  on this module. This envelope IS the eager arm's memory profile; the state rule replaces it.

The unit the replay arms capture per solver step is :meth:`CausalConditionalCFM.step`, a function
of explicit tensors; :func:`cosine_schedule`, :func:`euler_times` and :meth:`~CausalConditionalCFM.
cfg_inputs` give its other inputs. None of them syncs with the host.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from adapters.token2wav.dit import CFG_BATCH, ENVELOPE_FRAMES, DiT

ENVELOPE_STEPS = 16
"""Solver-step slots of the vendor's static cache envelope (an implementation constant)."""

NOISE_FRAMES = 50 * 600
"""Frames of the fixed noise buffer: 600 s of mel at 50 frames per second."""


def cosine_schedule(n_timesteps: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """The ``n_timesteps + 1`` solver times, computed with the vendor's ops on ``device``.

    The same call on the same device gives the same bits, so a device-resident copy made once
    equals what the stock path recomputes per chunk.
    """
    t_span = torch.linspace(0, 1, n_timesteps + 1, device=device, dtype=dtype)
    return 1 - torch.cos(t_span * 0.5 * torch.pi)


def euler_times(t_span: Tensor) -> list[tuple[Tensor, Tensor]]:
    """``(t, dt)`` of every Euler step, accumulated exactly as the vendor's loop does.

    ``t`` has shape (1,); the first ``dt`` is 0-dim, later ones (1,). They depend on the schedule
    only, so they can be computed once per (n_timesteps, device, dtype) and kept resident.
    """
    t, dt = t_span[0].unsqueeze(dim=0), t_span[1] - t_span[0]
    times = []
    for step in range(1, len(t_span)):
        times.append((t, dt))
        t = t + dt
        if step < len(t_span) - 1:
            dt = t_span[step + 1] - t
    return times


class CausalConditionalCFM(nn.Module):
    """Streaming flow-matching decoder: ``forward_chunk(mu, spks, cond, ...) -> (mel, caches)``.

    ``generator`` draws ``rand_noise`` (``None``: the global CPU generator, as the vendor does;
    the checkpoint does not hold it, so a real load must fix the seed or copy the noise in).
    The envelope is sized from the estimator (``envelope_steps`` slots × ``envelope_frames``),
    which at the real config is the vendor's (16, 16, 2, 1024, 2) and (16, 16, 2, 8, 1000, 128).
    """

    rand_noise: Tensor
    cnn_cache_buffer: Tensor
    att_cache_buffer: Tensor

    def __init__(
        self,
        estimator: DiT,
        inference_cfg_rate: float = 0.7,
        *,
        generator: torch.Generator | None = None,
        envelope_steps: int = ENVELOPE_STEPS,
        envelope_frames: int = ENVELOPE_FRAMES,
    ) -> None:
        super().__init__()
        assert inference_cfg_rate > 0, "inference_cfg_rate must be > 0 (flow.yaml uses 0.7)"
        self.estimator = estimator
        self.inference_cfg_rate = inference_cfg_rate
        self.out_channels = estimator.out_channels
        noise = torch.randn([1, self.out_channels, NOISE_FRAMES], generator=generator)
        self.register_buffer("rand_noise", noise, persistent=False)
        cnn = torch.zeros(envelope_steps, *estimator.cnn_cache_shape(CFG_BATCH))
        att = torch.zeros(envelope_steps, *estimator.att_cache_shape(CFG_BATCH, envelope_frames))
        self.register_buffer("cnn_cache_buffer", cnn, persistent=False)
        self.register_buffer("att_cache_buffer", att, persistent=False)

    @torch.inference_mode()
    def forward_chunk(
        self,
        mu: Tensor,
        spks: Tensor,
        cond: Tensor,
        n_timesteps: int = 10,
        temperature: float = 1.0,
        cnn_cache: Tensor | None = None,
        att_cache: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Decode one chunk: ``mu``, ``cond`` (1, 80, f), ``spks`` (1, 80) → mel (1, 80, f).

        Returns ``(mel, cnn_cache, att_cache)`` where the caches are the static envelope (all
        ``envelope_steps`` slots) and a view of it over ``past + f`` frames; pass them back as the
        next call's caches, after copying them out if anything else will run on this module.
        """
        offset = 0 if att_cache is None else att_cache.shape[4]
        frames = mu.shape[2]
        assert offset + frames <= self.rand_noise.shape[2], (
            f"frames {offset}..{offset + frames} run past the fixed noise buffer "
            f"({self.rand_noise.shape[2]}): trim the attention cache before this call"
        )
        z = self.rand_noise[:, :, offset : offset + frames] * temperature
        t_span = cosine_schedule(n_timesteps, mu.device, mu.dtype)
        return self.solve_euler_chunk(z, t_span, mu, spks, cond, cnn_cache, att_cache)

    def solve_euler_chunk(
        self,
        x: Tensor,
        t_span: Tensor,
        mu: Tensor,
        spks: Tensor,
        cond: Tensor,
        cnn_cache: Tensor | None = None,
        att_cache: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The stock Euler loop: :meth:`step` per solver time, new caches into the envelope."""
        n_steps = len(t_span) - 1
        assert n_steps <= self.cnn_cache_buffer.shape[0], (
            f"{n_steps} solver steps exceed the envelope's {self.cnn_cache_buffer.shape[0]} slots"
        )
        extent = x.shape[2] + (0 if att_cache is None else att_cache.shape[4])
        assert extent <= self.att_cache_buffer.shape[4], (
            f"attended extent {extent} exceeds the {self.att_cache_buffer.shape[4]}-frame "
            "envelope: trim the attention cache (keep prompt + retained history)"
        )
        mu_in, spks_in, cond_in = self.cfg_inputs(mu, spks, cond)
        for k, (t, dt) in enumerate(euler_times(t_span)):
            x, new_cnn, new_att = self.step(
                x,
                t,
                dt,
                mu_in,
                spks_in,
                cond_in,
                None if cnn_cache is None else cnn_cache[k],
                None if att_cache is None else att_cache[k],
            )
            self.cnn_cache_buffer[k] = new_cnn
            self.att_cache_buffer[k][:, :, :, :extent, :] = new_att
        return x, self.cnn_cache_buffer, self.att_cache_buffer[:, :, :, :, :extent, :]

    @staticmethod
    def cfg_inputs(mu: Tensor, spks: Tensor, cond: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The per-chunk constants of the CFG batch: each input stacked over its zeroed copy."""
        return (
            torch.cat([mu, torch.zeros_like(mu)], dim=0),
            torch.cat([spks, torch.zeros_like(spks)], dim=0),
            torch.cat([cond, torch.zeros_like(cond)], dim=0),
        )

    def step(
        self,
        x: Tensor,
        t: Tensor,
        dt: Tensor,
        mu_in: Tensor,
        spks_in: Tensor,
        cond_in: Tensor,
        cnn_cache: Tensor | None,
        att_cache: Tensor | None,
        *,
        resident: bool = False,
        cnn_out: Tensor | None = None,
        att_out: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One Euler step: ``x`` (1, 80, f) at time ``t`` → ``x + dt·v`` and this step's caches.

        ``cnn_cache`` (depth, 2, 2·hidden, 2) and ``att_cache`` (depth, 2, nh, past, 2·hd) are this
        step's slots (read only). ``resident``, ``cnn_out`` and ``att_out`` are passed to
        :meth:`DiT.forward_chunk`: with ``resident=True`` and caller-owned outputs the step has no
        host-to-device copy and writes only to addresses the caller chose (capturable); otherwise
        the new caches are the estimator's own envelope, overwritten by the next step.
        """
        velocity, new_cnn, new_att = self.estimator.forward_chunk(
            x.repeat(2, 1, 1),
            mu_in,
            t.repeat(2),
            spks_in,
            cond_in,
            cnn_cache,
            att_cache,
            resident=resident,
            cnn_out=cnn_out,
            att_out=att_out,
        )
        v_cond, v_uncond = velocity.chunk(2, dim=0)
        rate = self.inference_cfg_rate
        velocity = (1.0 + rate) * v_cond - rate * v_uncond
        return x + dt * velocity, new_cnn, new_att

"""The flow's replayed operators: the four functions a flow stream registers with the replay engine.

========================  =====================================================================
``flow_chunk[stock]``     a whole chunk over the stock state (arm Rc), staged inputs
``flow_chunk[carry]``     a whole chunk over the carry and the conv region (SRc), both aliased
``cfm_step[stock]``       one solver step over one envelope slot (R)
``cfm_step[carry]``       one solver step reading and writing the regions in place (SR), aliased
========================  =====================================================================

Each is registered with its catalog (:class:`~adapters.token2wav.catalogs.Catalogs`, from the
binding's call classes and the DiT's geometry) before traffic; the carry operators write the
carry's buffer and the conv region through (``write_through``), at addresses fixed for the
stream's life from the moment the stream first runs a state-rule arm (``rule()`` makes them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from adapters.token2wav.binding import FlowBinding
from adapters.token2wav.catalogs import Catalogs
from adapters.token2wav.cfm import ENVELOPE_STEPS, CausalConditionalCFM
from adapters.token2wav.chunks import StepFn, carry_chunk, carry_step, stock_chunk
from adapters.token2wav.dit import CFG_BATCH, DiT
from adapters.token2wav.flow import CausalMaskedDiffWithXvec, FlowCache
from adapters.token2wav.states import STOCK_KEYS, RuleState
from engine.replay import ReplayEngine, ReplayOp


@dataclass(frozen=True)
class FlowOperators:
    """The four registered operators of one flow stream."""

    chunk_stock: ReplayOp
    chunk_carry: ReplayOp
    step_stock: ReplayOp
    step_carry: ReplayOp

    def carry_step(self, view: Tensor, region: Tensor) -> StepFn:
        """The replayed state-rule solver step over the carry's ``view`` and the conv region."""
        op = self.step_carry

        def step(
            k: int,
            x: Tensor,
            t: Tensor,
            dt: Tensor,
            mu_in: Tensor,
            spks_in: Tensor,
            cond_in: Tensor,
        ) -> Tensor:
            out: Tensor = op(k, x, t, dt, mu_in, spks_in, cond_in, view, region)
            return out

        return step


def register_flow_operators(
    replay: ReplayEngine,
    flow: CausalMaskedDiffWithXvec,
    spk: Tensor,
    binding: FlowBinding,
    conformer: FlowCache,
    rule: Callable[[], RuleState],
) -> FlowOperators:
    """Register the four operators with their catalogs; ``conformer`` is the prompt-only
    conformer state (its shapes), ``rule()`` the regions the carry operators alias (made on
    first use)."""
    cfm: CausalConditionalCFM = flow.decoder  # type: ignore[assignment]
    dit: DiT = cfm.estimator
    axis, n, prompt = binding.carry.dim, binding.n_steps, binding.prompt_frames
    catalogs = Catalogs(
        binding.classes,
        conformer,
        est_cnn=(ENVELOPE_STEPS, *dit.cnn_cache_shape(CFG_BATCH)),
        est_att=(ENVELOPE_STEPS, *dit.att_cache_shape(CFG_BATCH, prompt)),
        carry_shape=(n, *dit.att_cache_shape(CFG_BATCH, binding.capacity)),
        n_steps=n,
        channels=flow.encoder_proj.out_features,
        estimator_axis=axis,
        conformer_axis=binding.conformer.dim,
        call_frames=binding.call_frames,
    )

    def chunk_stock(tokens: Tensor, *args: Tensor | bool) -> tuple[Tensor, ...]:
        *tensors, last = args
        state = dict(zip(STOCK_KEYS, tensors, strict=True))
        mel, new = stock_chunk(flow, spk, state, tokens, bool(last), binding)  # type: ignore[arg-type]
        return (mel, *(new[key] for key in STOCK_KEYS))

    def chunk_carry(
        tokens: Tensor,
        conf_cnn: Tensor,
        conf_att: Tensor,
        view: Tensor,
        region: Tensor,
        last_chunk: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:
        state = {"conformer_cnn_cache": conf_cnn, "conformer_att_cache": conf_att}
        buffer = rule().carry.buffer
        return carry_chunk(flow, spk, state, buffer, view, region, tokens, last_chunk, binding)

    def step_stock(*args: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return cfm.step(*args, resident=True)

    def step_carry(
        k: int,
        x: Tensor,
        t: Tensor,
        dt: Tensor,
        mu_in: Tensor,
        spks_in: Tensor,
        cond_in: Tensor,
        view: Tensor,
        region: Tensor,
    ) -> Tensor:
        buffer = rule().carry.buffer
        return carry_step(cfm, buffer, view, region, axis)(k, x, t, dt, mu_in, spks_in, cond_in)

    regions = lambda: (rule().carry.buffer, rule().cnn)  # noqa: E731
    register = replay.register
    return FlowOperators(
        chunk_stock=register("flow_chunk[stock]", chunk_stock, catalog=catalogs.chunk_stock()),
        chunk_carry=register(
            "flow_chunk[carry]",
            chunk_carry,
            catalog=catalogs.chunk_carry(),
            aliased=(3, 4),
            write_through=regions,
        ),
        step_stock=register("cfm_step[stock]", step_stock, catalog=catalogs.step_stock()),
        step_carry=register(
            "cfm_step[carry]",
            step_carry,
            catalog=catalogs.step_carry(),
            aliased=(7, 8),
            write_through=regions,
        ),
    )

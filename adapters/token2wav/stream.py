"""The Token2Wav flow stream under any ablation arm, switchable between calls.

========  =========================================  ==========================================
arm       state                                      compute
========  =========================================  ==========================================
eager     stock: static envelope, fresh ``cat`` trims the vendor's code path (:class:`StockStream`)
S         state rule: estimator caches in a carry    eager
R         stock                                      one replayed graph per solver step
Rc        stock                                      one replayed graph per chunk
SR        state rule                                 one replayed graph per solver step
SRc       state rule                                 one replayed graph per chunk
========  =========================================  ==========================================

The state rule keeps the estimator's attention caches in a :class:`~engine.carry.Carry` of
``n_steps`` slots × ``A = P + retained + call`` frames (the plan's bound, instead of the stock
16 × 1000 envelope) and its conv caches in a region of ``n_steps`` slots; both stay at one address
for the whole stream, turn resets included, so replay *aliases* them (no staging copy, pointer
checked). The stock state is fresh tensors every call, so replay must *stage* it (the replay-only
memory penalty the paper measures). The conformer caches (tens of MB) keep the stock form in every
arm. Every arm equals ``eager`` bit for bit; a call the catalog does not list runs eagerly and is
counted as a miss.

Audit mode (:meth:`FlowStream.set_auditor`, paper §3.6) shadows every retention of the carry
(each call's settle, an arm switch's retain) with the stock path through
:class:`~engine.audit.Auditor`: the declared ``cat([new, old])`` and trim beside the in-place
retention, compared bit for bit; turn resets are counted with the carry's address. The auditor
reads and copies, never writes what the stream computes, so outputs are the same with audit on
or off. Only the state-rule arms have a carry to shadow. Off (the default) the stream writes
the bare carry: no extra op, no allocation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from adapters.token2wav.catalogs import CallClass, Catalogs
from adapters.token2wav.cfm import ENVELOPE_STEPS, CausalConditionalCFM
from adapters.token2wav.chunks import (
    StepFn,
    call_frames,
    carry_chunk,
    carry_setup,
    carry_step,
    check_call,
    envelope_free_state,
    pad_slots,
    stock_chunk,
)
from adapters.token2wav.dit import CFG_BATCH
from adapters.token2wav.flow import CausalMaskedDiffWithXvec, FlowCache
from adapters.token2wav.stock import RETAINED_FRAMES, StockStream
from engine.arms import Arm, Granularity
from engine.audit import Auditor
from engine.carry import Carry, RetentionRule
from engine.contract import Order
from engine.replay import ReplayEngine, ReplayOp

AUDIT_REGION = "estimator_att"  # the declaration's name of the region the carry holds


class FlowStream:
    """One speaker's flow stream; ``chunk(tokens, last_chunk) -> mel``; implements ``ArmedStream``.

    ``classes`` is the catalog the plan derived from the declaration (extents × call sizes); calls
    outside it run eagerly. ``engine`` owns the graphs; give every stream of a process the same one.
    """

    def __init__(
        self,
        flow: CausalMaskedDiffWithXvec,
        prompt_tokens: Tensor,
        prompt_mel: Tensor,
        spk: Tensor,
        *,
        arm: Arm,
        engine: ReplayEngine,
        classes: tuple[CallClass, ...],
        n_steps: int = 10,
        max_call_tokens: int = 28,
    ) -> None:
        self.flow, self.spk, self.n_steps, self.engine = flow, spk, n_steps, engine
        self.prompt_frames, self.max_call_tokens = prompt_mel.shape[1], max_call_tokens
        self.lookahead = flow.pre_lookahead_len
        cfm: CausalConditionalCFM = flow.decoder  # type: ignore[assignment]
        self.stock: StockStream | None = None
        if cfm.att_cache_buffer.shape[0] > 0:  # the stock envelope exists: stock arms can run
            self.stock = StockStream(
                flow, prompt_tokens, prompt_mel, spk,
                n_timesteps=n_steps, max_call_tokens=max_call_tokens,
            )  # fmt: skip
            base_att, base_cnn = (t.clone() for t in envelope_free_state(self.stock.state, n_steps))
            self._prompt_conformer = _conformer(self.stock.state)
        else:  # state rule only: the prompt state is computed straight into its regions
            base_att, base_cnn = self._prompt_regions(cfm, prompt_mel)
            with torch.no_grad():
                tokens = torch.cat([prompt_tokens, prompt_tokens[:, : self.lookahead]], dim=1)
                self._prompt_conformer = carry_setup(
                    flow, spk, tokens, prompt_mel, base_att, base_cnn
                )
        capacity = self.prompt_frames + RETAINED_FRAMES + 2 * max_call_tokens
        # NEWEST_FIRST with history = P and prompt = 100: the vendor's cat([H[:P], H[-100:]]).
        self.carry = Carry(
            base_att,
            dim=4,
            prompt=RETAINED_FRAMES,
            history=self.prompt_frames,
            order=Order.NEWEST_FIRST,
            capacity=capacity,
        )
        self._base_cnn = base_cnn
        self.cnn_region = base_cnn.clone()
        self.conformer: FlowCache = dict(self._prompt_conformer)
        self.auditor: Auditor | None = None  # audit mode off: see set_auditor
        self._arm = arm if arm.state_rule else Arm.S
        self.classes = classes
        self.ops = self._register(classes)
        self.reset()
        self.set_arm(arm)

    def _prompt_regions(
        self, cfm: CausalConditionalCFM, prompt_mel: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Empty prompt-state regions of ``n_steps`` slots (P frames for the attention caches)."""
        dit, dtype, device = cfm.estimator, prompt_mel.dtype, prompt_mel.device
        att_shape = (self.n_steps, *dit.att_cache_shape(CFG_BATCH, self.prompt_frames))
        att = torch.empty(att_shape, dtype=dtype, device=device)
        cnn = torch.empty(
            (self.n_steps, *dit.cnn_cache_shape(CFG_BATCH)), dtype=dtype, device=device
        )
        return att, cnn

    # -- audit mode --------------------------------------------------------------------------

    def set_auditor(self, auditor: Auditor | None, declared: RetentionRule | None = None) -> None:
        """Shadow every carry write from now on with ``auditor`` (None or disabled: audit off).

        The carry's region is :data:`AUDIT_REGION`; ``declared`` is its retention as the
        declaration states it (``engine.audit.declared_retention``), which the carry is checked
        against; without it the carry's own rule is (its in-place moves against the stock
        concatenation of the same rule). Takes effect at the next write.
        """
        if auditor is None or not auditor.enabled:
            self.auditor = None
            return
        if declared is not None:
            auditor.declare(AUDIT_REGION, declared)
        self.auditor = auditor

    # -- ArmedStream -------------------------------------------------------------------------

    @property
    def arm(self) -> Arm:
        return self._arm

    def set_arm(self, arm: Arm) -> None:
        """Move the state into ``arm``'s discipline by value; takes effect at the next call."""
        if arm.state_rule and not self._arm.state_rule:
            stock = self._stock()
            att, cnn = envelope_free_state(stock.state, self.n_steps)
            # Within the bound: kept whole, written in place.
            if self.auditor is None:
                self.carry.retain(att)
            else:
                self.auditor.retain(AUDIT_REGION, self.carry, att)
            self.cnn_region.copy_(cnn)
            self.conformer = _conformer(stock.state)
        elif self._arm.state_rule and not arm.state_rule:
            if self.stock is None:
                raise ValueError(
                    f"arm {arm} needs the stock cache envelope, but this flow was built without "
                    "it (envelope=False): choose S, SR or SRc, or load the flow with envelope=True"
                )
            self.stock.state = self.stock_state()
        self._arm = arm

    # -- the stream --------------------------------------------------------------------------

    def reset(self) -> None:
        """Turn reset: back to the prompt-only state, in place for the state rule."""
        if self.stock is not None:
            self.stock.reset()
        if self.auditor is None:
            self.carry.reset()
        else:
            self.auditor.reset(AUDIT_REGION, self.carry)
        self.cnn_region.copy_(self._base_cnn)
        self.conformer = dict(self._prompt_conformer)

    @torch.inference_mode()
    def chunk(self, tokens: Tensor, last_chunk: bool = False) -> Tensor:
        """The mel ``[1, 80, f]`` of one token window, under the current arm.

        Runs under ``torch.inference_mode`` for every arm, as the vendor's ``inference_chunk``
        does: under ``no_grad`` each operator would still pay autograd's view and version
        bookkeeping on the host, a few percent of a launch-bound chunk. The carry and the conv
        region are made outside it and stay ordinary tensors (``reset`` writes them outside it);
        the replay engine's staged buffers are made and written only inside it.
        """
        check_call(tokens, last_chunk, self.lookahead, self.max_call_tokens)
        if tokens.shape[1] == 0:  # an empty final call only flushes the vocoder
            return self.spk.new_zeros(1, self.flow.encoder_proj.out_features, 0)
        if self._arm is Arm.EAGER:
            return self._stock().chunk(tokens, last_chunk)
        if self._arm.state_rule:
            return self._chunk_state_rule(tokens, last_chunk)
        return self._chunk_stock(tokens, last_chunk)

    def stock_state(self) -> FlowCache:
        """The stream's state in the stock representation (for exactness checks and switches)."""
        if not self._arm.state_rule:
            return self._stock().state
        slots = ENVELOPE_STEPS
        return {
            **self.conformer,
            "estimator_cnn_cache": pad_slots(self.cnn_region, slots),
            "estimator_att_cache": pad_slots(self.carry.view(), slots),
        }

    # -- arms --------------------------------------------------------------------------------

    def _stock(self) -> StockStream:
        assert self.stock is not None, "stock arms are refused by set_arm without the envelope"
        return self.stock

    def _chunk_stock(self, tokens: Tensor, last_chunk: bool) -> Tensor:
        stock, P = self._stock(), self.prompt_frames
        state = stock.state
        if self._arm.granularity is Granularity.CHUNK:
            outputs = self.ops["chunk_stock"](tokens, *(state[k] for k in _STOCK_KEYS), last_chunk)
            mel: Tensor = outputs[0]
            stock.state = dict(zip(_STOCK_KEYS, outputs[1:], strict=True))
            return mel
        mel, stock.state = stock_chunk(
            self.flow, self.spk, state, tokens, last_chunk, P, self.n_steps, self.ops["step_stock"]
        )
        return mel

    def _chunk_state_rule(self, tokens: Tensor, last_chunk: bool) -> Tensor:
        carry, conf, auditor = self.carry, self.conformer, self.auditor
        extent = carry.extent
        # Audit mode: the old cache the stock path would concatenate the new frames with.
        live = None if auditor is None else carry.view().clone()
        mel: Tensor
        if self._arm.granularity is Granularity.CHUNK:
            mel, cnn, att = self.ops["chunk_carry"](
                tokens,
                conf["conformer_cnn_cache"],
                conf["conformer_att_cache"],
                carry.view(),
                self.cnn_region,
                last_chunk,
            )
        else:
            step = self._replayed_carry_step() if self._arm.replay else None
            mel, cnn, att = carry_chunk(
                self.flow,
                self.spk,
                conf,
                carry.buffer,
                carry.view(),
                self.cnn_region,
                tokens,
                last_chunk,
                self.prompt_frames,
                step,
            )
        settled = extent + call_frames(tokens.shape[1], last_chunk)
        if auditor is None:
            carry.settle(settled)
        else:
            auditor.settle(AUDIT_REGION, carry, settled, live)
        self.conformer = {"conformer_cnn_cache": cnn, "conformer_att_cache": att}
        return mel

    def _replayed_carry_step(self) -> StepFn:
        op, view, region = self.ops["step_carry"], self.carry.view(), self.cnn_region

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

    def stock_shapes(self) -> FlowCache:
        """Tensors shaped as the stock state at the prompt (envelope slots included)."""
        slots = ENVELOPE_STEPS
        return {
            **self._prompt_conformer,
            "estimator_cnn_cache": pad_slots(self._base_cnn, slots),
            "estimator_att_cache": pad_slots(self.carry.base, slots),
        }

    # -- replayed operators ------------------------------------------------------------------

    def _register(self, classes: tuple[CallClass, ...]) -> dict[str, ReplayOp]:
        """The four replayed operators and their catalogs, built from the plan's classes."""
        cfm: CausalConditionalCFM = self.flow.decoder  # type: ignore[assignment]
        flow, spk, P, n = self.flow, self.spk, self.prompt_frames, self.n_steps

        def chunk_stock(tokens: Tensor, *args: Tensor | bool) -> tuple[Tensor, ...]:
            *tensors, last = args
            state = dict(zip(_STOCK_KEYS, tensors, strict=True))
            mel, new = stock_chunk(flow, spk, state, tokens, bool(last), P, n)  # type: ignore[arg-type]
            return (mel, *(new[key] for key in _STOCK_KEYS))

        def chunk_carry(
            tokens: Tensor,
            conf_cnn: Tensor,
            conf_att: Tensor,
            view: Tensor,
            region: Tensor,
            last_chunk: bool,
        ) -> tuple[Tensor, Tensor, Tensor]:
            conformer = {"conformer_cnn_cache": conf_cnn, "conformer_att_cache": conf_att}
            return carry_chunk(
                flow, spk, conformer, self.carry.buffer, view, region, tokens, last_chunk, P
            )

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
            return carry_step(cfm, self.carry.buffer, view, region)(
                k, x, t, dt, mu_in, spks_in, cond_in
            )

        regions = lambda: (self.carry.buffer, self.cnn_region)  # noqa: E731
        catalogs = Catalogs(self, classes)
        register = self.engine.register
        return {
            "chunk_stock": register(
                "flow_chunk[stock]", chunk_stock, catalog=catalogs.chunk_stock()
            ),
            "chunk_carry": register(
                "flow_chunk[carry]",
                chunk_carry,
                catalog=catalogs.chunk_carry(),
                aliased=(3, 4),
                write_through=regions,
            ),
            "step_stock": register("cfm_step[stock]", step_stock, catalog=catalogs.step_stock()),
            "step_carry": register(
                "cfm_step[carry]",
                step_carry,
                catalog=catalogs.step_carry(),
                aliased=(7, 8),
                write_through=regions,
            ),
        }


_STOCK_KEYS = (
    "conformer_cnn_cache",
    "conformer_att_cache",
    "estimator_cnn_cache",
    "estimator_att_cache",
)


def _conformer(state: FlowCache) -> FlowCache:
    return {key: state[key] for key in _STOCK_KEYS[:2]}

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
checked). They are made when the stream first runs a state-rule arm (at construction, or at the
first switch into one): a stream that runs only stock arms holds the stock state alone, as the
vendor's does. The stock state is fresh tensors every call, so replay must *stage* it (the
replay-only memory penalty the paper measures). The two states are
:mod:`adapters.token2wav.states`; the replayed operators :mod:`adapters.token2wav.operators`;
every number comes from the binding
(:func:`adapters.token2wav.binding.bind_flow`: the declaration and its plan). Every arm equals
``eager`` bit for bit; a call the catalog does not list runs eagerly and is counted as a miss.

Audit mode (:meth:`FlowStream.set_auditor`, paper §3.6) writes the carry through the engine's
audited wrapper (:func:`engine.audit.audited`), which shadows every retention (each call's
settle, an arm switch's retain) with the stock path: the declared ``cat([new, old])`` and trim
beside the in-place retention, compared bit for bit; turn resets are counted with the carry's
address. The auditor reads and copies, never writes what the stream computes, so outputs are the
same with audit on or off. Only the state-rule arms have a carry to shadow. Off (the default)
the stream writes the bare carry: no extra op, no allocation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from adapters.token2wav.binding import FlowBinding
from adapters.token2wav.cfm import CausalConditionalCFM
from adapters.token2wav.chunks import carry_chunk, stock_chunk
from adapters.token2wav.declared import CARRY_REGION
from adapters.token2wav.flow import CausalMaskedDiffWithXvec, FlowCache
from adapters.token2wav.operators import FlowOperators, register_flow_operators
from adapters.token2wav.states import (
    STOCK_KEYS,
    FlowState,
    PromptState,
    RuleState,
    conformer_state,
)
from adapters.token2wav.stock import StockStream, check_binding, check_call
from engine.arms import Arm, Granularity
from engine.audit import Auditor
from engine.carry import Carry, RetentionRule
from engine.replay import ReplayEngine


class FlowStream:
    """One speaker's flow stream; ``chunk(tokens, last_chunk) -> mel``; implements ``ArmedStream``.

    ``binding`` is what the declaration and its plan fix for this voice (retention, the carry's
    capacity, call sizes, the catalog's call classes); calls outside the catalog run eagerly.
    ``replay`` owns the graphs; give every stream of a process the same one.
    ``stock_arms=False`` keeps no stock state even when the flow has the envelope (a session
    among many runs the state rule only: two stock states are ~1.2 GB at full size);
    ``prompt`` is the voice's prompt-only state when another stream already made it (shared,
    never written), else the stream makes its own.
    """

    def __init__(
        self,
        flow: CausalMaskedDiffWithXvec,
        prompt_tokens: Tensor,
        prompt_mel: Tensor,
        spk: Tensor,
        *,
        binding: FlowBinding,
        arm: Arm,
        replay: ReplayEngine,
        stock_arms: bool = True,
        prompt: PromptState | None = None,
    ) -> None:
        check_binding(flow, prompt_mel, binding)
        self.flow, self.spk, self.binding, self.replay = flow, spk, binding, replay
        self._prompt = (prompt_tokens, prompt_mel)
        self._prompt_state = prompt
        self.stock: StockStream | None = None
        self._rule: RuleState | None = None
        self._auditor: Auditor | None = None
        cfm: CausalConditionalCFM = flow.decoder  # type: ignore[assignment]
        self._enveloped = cfm.att_cache_buffer.shape[0] > 0
        if self._enveloped and stock_arms:  # the stock envelope exists: stock arms can run
            self.stock = StockStream(flow, prompt_tokens, prompt_mel, spk, binding=binding)
            conformer = conformer_state(self.stock.prompt_state)
        else:  # state rule only: the prompt state is computed straight into its regions
            conformer = self.rule.conformer
        self.ops: FlowOperators = register_flow_operators(
            replay, flow, spk, binding, conformer, lambda: self.rule
        )
        self._arm = arm
        if arm.state_rule:  # made now: warm-up captures at the address the stream keeps
            _ = self.rule
        self.reset()

    @property
    def rule(self) -> RuleState:
        """The state rule's regions: made on first use, then kept at one address."""
        if self._rule is None:
            if self._prompt_state is None:
                tokens, mel = self._prompt
                self._prompt_state = PromptState.build(
                    self.flow, tokens, mel, self.spk, self.binding, self.stock
                )
            self._rule = RuleState.build(self._prompt_state, self.binding)
            self._rule.audit(self._auditor)
        return self._rule

    @property
    def carry(self) -> Carry:
        """The state rule's carry (the estimator attention caches)."""
        return self.rule.carry

    @property
    def cnn_region(self) -> Tensor:
        """The state rule's conv region."""
        return self.rule.cnn

    # -- audit mode --------------------------------------------------------------------------

    @property
    def auditor(self) -> Auditor | None:
        return self._rule.auditor if self._rule is not None else self._auditor

    def set_auditor(self, auditor: Auditor | None, declared: RetentionRule | None = None) -> None:
        """Shadow every carry write from now on with ``auditor`` (None or disabled: audit off).

        The carry's region is :data:`~adapters.token2wav.binding.CARRY_REGION`; ``declared`` is
        its retention as the declaration states it (``engine.carry.declared_retention``), which
        the carry is checked against; without it the carry's own rule is (its in-place moves
        against the stock concatenation of the same rule). Takes effect at the next write.
        """
        if auditor is not None and auditor.enabled and declared is not None:
            auditor.declare(CARRY_REGION, declared)
        self._auditor = auditor
        if self._rule is not None:
            self._rule.audit(auditor)

    # -- ArmedStream -------------------------------------------------------------------------

    @property
    def arm(self) -> Arm:
        return self._arm

    def set_arm(self, arm: Arm) -> None:
        """Move the state into ``arm``'s discipline by value; takes effect at the next call."""
        if arm.state_rule != self._arm.state_rule:
            self._state(arm).load(self._state(self._arm).stock_state())
        self._arm = arm

    # -- the stream --------------------------------------------------------------------------

    def reset(self) -> None:
        """Turn reset: back to the prompt-only state, in place for the state rule."""
        if self.stock is not None:
            self.stock.reset()
        if self._rule is not None:
            self._rule.reset()

    @torch.inference_mode()
    def chunk(self, tokens: Tensor, last_chunk: bool = False) -> Tensor:
        """The mel ``[1, 80, f]`` of one token window, under the current arm.

        Runs under ``torch.inference_mode`` for every arm, as the vendor's ``inference_chunk``
        does: under ``no_grad`` each operator would still pay autograd's view and version
        bookkeeping on the host, a few percent of a launch-bound chunk. The carry and the conv
        region are made outside it and stay ordinary tensors (``reset`` writes them outside it);
        the replay engine's staged buffers are made and written only inside it.
        """
        check_call(tokens, last_chunk, self.binding)
        if tokens.shape[1] == 0:  # an empty final call only flushes the vocoder
            return self.spk.new_zeros(1, self.flow.encoder_proj.out_features, 0)
        if self._arm is Arm.EAGER:
            return self._stock().chunk(tokens, last_chunk)
        if self._arm.state_rule:
            return self._chunk_state_rule(tokens, last_chunk)
        return self._chunk_stock(tokens, last_chunk)

    def stock_state(self) -> FlowCache:
        """The stream's state in the stock representation (for exactness checks and switches)."""
        return self._state(self._arm).stock_state()

    # -- arms --------------------------------------------------------------------------------

    def _state(self, arm: Arm) -> FlowState:
        return self.rule if arm.state_rule else self._stock()

    def _stock(self) -> StockStream:
        if self.stock is None and self._enveloped:
            raise ValueError(
                "the stock arms need the stock state, which this stream does not keep (a "
                "session opened among many runs the state rule only): choose S, SR or SRc"
            )
        if self.stock is None:
            raise ValueError(
                "the stock arms need the stock cache envelope, but this flow was built without "
                "it (envelope=False): choose S, SR or SRc, or load the flow with envelope=True"
            )
        return self.stock

    def _chunk_stock(self, tokens: Tensor, last_chunk: bool) -> Tensor:
        stock = self._stock()
        state = stock.state
        if self._arm.granularity is Granularity.CHUNK:
            outputs = self.ops.chunk_stock(tokens, *(state[k] for k in STOCK_KEYS), last_chunk)
            mel: Tensor = outputs[0]
            stock.state = dict(zip(STOCK_KEYS, outputs[1:], strict=True))
            return mel
        mel, stock.state = stock_chunk(
            self.flow, self.spk, state, tokens, last_chunk, self.binding, self.ops.step_stock
        )
        return mel

    def _chunk_state_rule(self, tokens: Tensor, last_chunk: bool) -> Tensor:
        rule, conf = self.rule, self.rule.conformer
        view, extent = rule.carry.view(), rule.carry.extent
        mel: Tensor
        if self._arm.granularity is Granularity.CHUNK:
            mel, cnn, att = self.ops.chunk_carry(
                tokens,
                conf["conformer_cnn_cache"],
                conf["conformer_att_cache"],
                view,
                rule.cnn,
                last_chunk,
            )
        else:
            step = self.ops.carry_step(view, rule.cnn) if self._arm.replay else None
            mel, cnn, att = carry_chunk(
                self.flow,
                self.spk,
                conf,
                rule.carry.buffer,
                view,
                rule.cnn,
                tokens,
                last_chunk,
                self.binding,
                step,
            )
        settled = extent + self.binding.call_frames(tokens.shape[1], last_chunk)
        rule.settle(settled, {"conformer_cnn_cache": cnn, "conformer_att_cache": att})
        return mel

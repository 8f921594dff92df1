"""The flow stream's state under the two disciplines, behind one small protocol.

:class:`FlowState` is what the stream asks of a state: a turn ``reset``, the state in the stock
representation (``stock_state``) and ``load``, taking such a state over by value, so an arm switch
between the disciplines is ``new.load(old.stock_state())``. Two implementations:

* :class:`~adapters.token2wav.stock.StockStream` — the stock state: fresh tensors per call, the
  estimator caches in the static envelope's 16 slots (the vendor's path);
* :class:`RuleState` — the state rule: the estimator attention caches in a
  :class:`~engine.carry.Carry` of ``n_steps`` slots sized to the plan's bound, the conv caches in a
  region of ``n_steps`` slots, both at one address for the whole stream, turn resets included. The
  conformer caches (tens of MB) keep the stock form.

The carry is written only through :attr:`RuleState.writer`: the bare carry, or the audited
wrapper (:func:`engine.audit.audited`) in audit mode, so the audit on/off decision is made once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from adapters.token2wav.binding import FlowBinding
from adapters.token2wav.cfm import ENVELOPE_STEPS, CausalConditionalCFM
from adapters.token2wav.chunks import carry_setup, envelope_free_state, pad_slots
from adapters.token2wav.declared import CARRY_REGION
from adapters.token2wav.dit import CFG_BATCH
from adapters.token2wav.flow import CausalMaskedDiffWithXvec, FlowCache
from adapters.token2wav.stock import StockStream
from engine.audit import AuditedCarry, Auditor, CarryLike, audited
from engine.carry import Carry, CarryValue

STOCK_KEYS = (
    "conformer_cnn_cache",
    "conformer_att_cache",
    "estimator_cnn_cache",
    "estimator_att_cache",
)
CONFORMER_KEYS = STOCK_KEYS[:2]


class FlowState(Protocol):
    """A flow stream's state under one discipline, convertible by value to and from the stock
    representation (16 envelope slots for the estimator caches)."""

    def reset(self) -> None:
        """Turn reset: back to the prompt-only state."""

    def stock_state(self) -> FlowCache:
        """The state in the stock representation."""
        ...

    def load(self, state: FlowCache) -> None:
        """Take over ``state`` (stock representation) by value."""


@dataclass(frozen=True)
class PromptState:
    """A voice's prompt-only state under the state rule: the estimator caches' ``n_steps`` live
    slots over the prompt (``att``: the carry's base, ``cnn``: the conv region's) and the
    conformer caches. Every turn reset restores it; nothing writes it, so every stream of the
    same voice and binding may share one (``adapters.token2wav.sessions``: once per voice)."""

    att: Tensor
    cnn: Tensor
    conformer: FlowCache

    @classmethod
    def build(
        cls,
        flow: CausalMaskedDiffWithXvec,
        prompt_tokens: Tensor,
        prompt_mel: Tensor,
        spk: Tensor,
        binding: FlowBinding,
        stock: StockStream | None,
    ) -> PromptState:
        """Cut from the stock prompt state when there is one, else computed straight into the
        regions (the same operations, the same bits: ``carry_setup``)."""
        n_steps = binding.n_steps
        if stock is not None:
            prompt = stock.prompt_state
            att, cnn = (t.clone() for t in envelope_free_state(prompt, n_steps))
            return cls(att, cnn, conformer_state(prompt))
        cfm: CausalConditionalCFM = flow.decoder  # type: ignore[assignment]
        dit, like = cfm.estimator, prompt_mel
        att_shape = (n_steps, *dit.att_cache_shape(CFG_BATCH, binding.prompt_frames))
        att = torch.empty(att_shape, dtype=like.dtype, device=like.device)
        cnn_shape = (n_steps, *dit.cnn_cache_shape(CFG_BATCH))
        cnn = torch.empty(cnn_shape, dtype=like.dtype, device=like.device)
        lookahead = prompt_tokens[:, : binding.lookahead]
        with torch.no_grad():
            tokens = torch.cat([prompt_tokens, lookahead], dim=1)
            conformer = carry_setup(flow, spk, tokens, prompt_mel, att, cnn)
        return cls(att, cnn, conformer)


class RuleState:
    """The state rule's regions: the estimator attention carry, the conv region, the conformer.

    ``carry`` is the bare :class:`~engine.carry.Carry` (its address, counters and buffer);
    ``writer`` is what every write goes through; ``cnn`` the conv region.
    """

    def __init__(self, carry: Carry, cnn_base: Tensor, conformer: FlowCache) -> None:
        self.carry = carry
        self.writer: CarryLike = carry
        self._cnn_base, self.cnn = cnn_base, cnn_base.clone()
        self._prompt_conformer = dict(conformer)
        self.conformer: FlowCache = dict(conformer)

    @classmethod
    def build(cls, prompt: PromptState, binding: FlowBinding) -> RuleState:
        """The stream's regions, starting from the voice's prompt-only state (shared, read)."""
        rule = binding.carry
        carry = Carry(
            prompt.att,
            dim=rule.dim,
            prompt=rule.prompt,
            history=rule.history,
            order=rule.order,
            capacity=binding.capacity,
        )
        return cls(carry, prompt.cnn, prompt.conformer)

    @property
    def auditor(self) -> Auditor | None:
        """The auditor the carry's writes go through, or None (audit off)."""
        return self.writer.auditor if isinstance(self.writer, AuditedCarry) else None

    def audit(self, auditor: Auditor | None) -> None:
        """Write the carry through ``auditor`` from now on (None or disabled: the bare carry)."""
        self.writer = audited(self.carry, CARRY_REGION, auditor)

    def reset(self) -> None:
        self.writer.reset()
        self.cnn.copy_(self._cnn_base)
        self.conformer = dict(self._prompt_conformer)

    def stock_state(self) -> FlowCache:
        return {
            **self.conformer,
            "estimator_cnn_cache": pad_slots(self.cnn, ENVELOPE_STEPS),
            "estimator_att_cache": pad_slots(self.carry.view(), ENVELOPE_STEPS),
        }

    def load(self, state: FlowCache) -> None:
        """Within the bound: the stock caches are kept whole, written in place."""
        att, cnn = envelope_free_state(state, self.cnn.shape[0])  # its n_steps live slots
        self.writer.retain(att)
        self.cnn.copy_(cnn)
        self.conformer = conformer_state(state)

    @property
    def prompt_conformer(self) -> FlowCache:
        """The voice's prompt-only conformer caches (shared, read-only), what a reset restores."""
        return self._prompt_conformer

    # -- by value: a session's own state on bindings shared by a lane ----------------------

    def initial_value(self) -> RuleValue:
        """A session's own regions at the reset state: a carry buffer and a conv region of
        this state's shapes (its two allocations); the conformer starts as the voice's shared
        prompt-only one (the session's own comes with its first call's outputs)."""
        return RuleValue(self.carry.initial_value(), self._cnn_base.clone(), self._prompt_conformer)

    def load_value(self, value: RuleValue) -> None:
        """Take ``value`` over in place, at this state's addresses (what the graphs alias); the
        carry is loaded bare, outside audit mode (a shared binding is not audited)."""
        self.carry.load(value.carry)
        self.cnn.copy_(value.cnn)
        self.conformer = dict(value.conformer)

    def save_value(self, value: RuleValue) -> None:
        """Write this state into ``value`` in place, and drop the references to its conformer
        (this state then holds the prompt's, never another session's tensors)."""
        self.carry.save(value.carry)
        value.cnn.copy_(self.cnn)
        value.conformer = dict(self.conformer)
        self.conformer = dict(self._prompt_conformer)

    def settle(self, extent: int, conformer: FlowCache) -> None:
        """After a call wrote ``extent`` frames through the carry: retention, in place."""
        self.writer.settle(extent)
        self.conformer = conformer


@dataclass(eq=False)
class RuleValue:
    """A :class:`RuleState` by value: the carry's buffer and extent, the conv region, the
    conformer caches (fresh tensors per call, held by reference)."""

    carry: CarryValue
    cnn: Tensor
    conformer: FlowCache


def conformer_state(state: FlowCache) -> FlowCache:
    """The conformer caches of a stock-form state."""
    return {key: state[key] for key in CONFORMER_KEYS}

"""Bind the Token2Wav flow to its declaration: every number the flow stream reads, from the plan.

The declaration (``assets/declarations/minicpmo45_token2wav.yaml`` or the Lychee-FD one) states the
clocks, the retention, the admissible calls and the vocabulary; :func:`engine.plan.make_plan`
derives at the voice's prompt length ``P`` (and the solver steps ``n_steps``) the bound of every
region and the estimator's catalog. :func:`bind_flow` turns that into one :class:`FlowBinding`:
the carry's retention rule and capacity (the plan's bound ``A``), the conformer's retention, the
call sizes, the lookahead, the rates and the call classes the replayed operators are specialized
for. No number here is typed twice: edit the declaration and the stream, its carry, its catalog
and the warm-up follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from adapters.token2wav.catalogs import CallClass
from adapters.token2wav.declared import (
    CARRY_REGION,
    CONFORMER_REGION,
    ESTIMATOR,
    check_flow_declaration,
    flow_declaration,
)
from engine.carry import RetentionRule, declared_retention
from engine.contract import Declaration, DeclarationError
from engine.plan import Plan, make_plan


@dataclass(frozen=True)
class FlowBinding:
    """What the declaration and its plan fix for one voice; the flow stream reads only this.

    ``values`` is the operating point at this prompt (``f_prompt`` = P); ``carry`` the estimator
    attention cache's retention (newest first, ``f_retained`` prompt frames and P history along
    the region's clock axis), ``capacity`` its plan bound ``A`` (retained + the largest call) and
    ``width`` its catalog width ``K`` (the grid extents a turn passes before retention binds);
    ``conformer`` the conformer cache's retention; ``classes`` the catalog as call classes.
    """

    declaration: str
    values: Mapping[str, int]
    carry: RetentionRule
    capacity: int
    width: int
    conformer: RetentionRule
    max_call_tokens: int
    classes: tuple[CallClass, ...]
    sample_rate: int
    token_rate: float

    @property
    def stride_s(self) -> float:
        """Seconds of speech one steady call advances (MiniCPM-o: 25 tokens, 1 s)."""
        return self.stride_tokens / self.token_rate

    @property
    def prompt_frames(self) -> int:
        return self.values["f_prompt"]

    @property
    def n_steps(self) -> int:
        return self.values["n_steps"]

    @property
    def lookahead(self) -> int:
        return self.values["lookahead"]

    @property
    def stride_tokens(self) -> int:
        return self.values["stride_tokens"]

    @property
    def frames_per_token(self) -> int:
        return self.values["frames_per_token"]

    @property
    def vocab(self) -> int:
        """Speech-token codes."""
        return self.values["vocab"]

    def call_frames(self, tokens: int, last_chunk: bool) -> int:
        """Mel frames a call of ``tokens`` tokens advances (its lookahead is consumed if last)."""
        return self.frames_per_token * (tokens if last_chunk else tokens - self.lookahead)


def bind_flow(
    family: str | Declaration, prompt_frames: int, n_steps: int | None = None
) -> FlowBinding:
    """The flow's binding at prompt length ``prompt_frames`` and ``n_steps`` solver steps (the
    declaration's unless given). Raises ``DeclarationError`` naming what the declaration lacks."""
    decl = flow_declaration(family)
    check_flow_declaration(decl)
    overrides = {"f_prompt": prompt_frames}
    if n_steps is not None:
        overrides["n_steps"] = n_steps
    plan = make_plan(decl, overrides)
    env = plan.values
    max_call = max(_token_bound(decl, kind, env) for kind in decl.operators[ESTIMATOR].calls)
    return FlowBinding(
        declaration=decl.name,
        values=env,
        carry=declared_retention(decl.regions[CARRY_REGION], env),
        capacity=plan.region(CARRY_REGION).bound,
        width=plan.region(CARRY_REGION).width,
        conformer=declared_retention(decl.regions[CONFORMER_REGION], env),
        max_call_tokens=max_call,
        classes=call_classes(plan, max_call),
        sample_rate=round(decl.clock_rate("sample", env)),
        token_rate=decl.clock_rate("token", env),
    )


def _token_bound(decl: Declaration, kind: str, env: Mapping[str, int]) -> int:
    """The most tokens a call of ``kind`` sends (its fixed count or its range's top)."""
    call = decl.calls[kind]
    if "tokens" in call.ranges:
        return call.bounds("tokens", env)[1]
    if "tokens" in call.fixed:
        return call.fixed["tokens"].evaluate(env)
    raise DeclarationError(f"calls.{kind}: a Token2Wav call declares tokens (fixed or [low, high])")


def call_classes(plan: Plan, max_call_tokens: int) -> tuple[CallClass, ...]:
    """The estimator's catalog as call classes (token count, ``last_chunk``, attended extent).

    The plan's catalog (grid closure plus the declared stream's calls), widened to every call
    size a stream admits (non-final calls of ``lookahead + 1 .. max_call_tokens`` tokens, final
    ones of ``1 .. max_call_tokens``) at every grid extent: flushes land on grid extents when turns
    start with full windows; anything else is a counted miss.
    """
    per_token, lookahead = plan.values["frames_per_token"], plan.values["lookahead"]
    classes = {
        CallClass(
            entry.frames // per_token, entry.kind == "last", dict(entry.extents)[CARRY_REGION]
        )
        for entry in plan.operator(ESTIMATOR).catalog
    }
    for extent in plan.region(CARRY_REGION).extents:
        classes |= {CallClass(n, False, extent) for n in range(lookahead + 1, max_call_tokens + 1)}
        classes |= {CallClass(n, True, extent) for n in range(1, max_call_tokens + 1)}
    return tuple(sorted(classes, key=lambda c: (c.extent, c.last_chunk, c.tokens)))

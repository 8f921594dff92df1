"""Bind the Token2Wav flow to its declaration: the plan's catalog becomes the streams' call classes.

The declaration (``assets/declarations/minicpmo45_token2wav.yaml`` or the Lychee-FD one) states the
clocks, the retention and the admissible calls; :func:`engine.plan.make_plan` enumerates the
estimator's catalog at the voice's prompt length ``P`` (part of every signature). Each catalog
entry is one :class:`~adapters.token2wav.stream.CallClass`: token count, ``last_chunk``, attended
extent. Nothing else is admitted to replay.
"""

from __future__ import annotations

from adapters.token2wav.catalogs import CallClass
from engine.contract import load_declaration
from engine.plan import make_plan

DECLARATIONS = {"minicpmo45": "minicpmo45_token2wav", "lycheefd": "lycheefd_token2wav"}


def call_classes(
    declaration: str, prompt_frames: int, max_call_tokens: int = 28, lookahead: int = 3
) -> tuple[CallClass, ...]:
    """The estimator's catalog at prompt length ``prompt_frames`` as call classes.

    The plan's catalog (grid closure plus the declared stream's calls), widened to every call
    size a stream admits (non-final calls of ``lookahead + 1 ..  max_call_tokens`` tokens, final
    ones of ``1 .. max_call_tokens``) at every grid extent: flushes land on grid extents when turns
    start with full windows; anything else is a counted miss.
    """
    decl = load_declaration(DECLARATIONS.get(declaration, declaration))
    plan = make_plan(decl, {"f_prompt": prompt_frames})
    per_token = plan.values["frames_per_token"]
    classes = {
        CallClass(sig.frames // per_token, sig.kind == "last", dict(sig.extents)["estimator_att"])
        for sig in plan.operator("estimator").catalog
    }
    for extent in plan.region("estimator_att").extents:
        classes |= {CallClass(n, False, extent) for n in range(lookahead + 1, max_call_tokens + 1)}
        classes |= {CallClass(n, True, extent) for n in range(1, max_call_tokens + 1)}
    return tuple(sorted(classes, key=lambda c: (c.extent, c.last_chunk, c.tokens)))

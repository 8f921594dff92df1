"""Weights per step on a one-step input, without the vendor's one-tensor concatenation.

A transformer with ``weights_per_step`` (the depformer: each codebook step has its own
projections and feed-forward) applies them with the vendor's ``apply_weights_per_step``
(``moshi`` 0.2.13), which runs the step's module on each step of the input and concatenates the
results. A streaming step is one step long, so the concatenation joins one tensor: a copy of
its values, three a layer a step (the attention's input and output projections and the gated
feed-forward), 18 a depformer step at the released six layers. :func:`per_step` returns the
step's module's result itself (the same values; the module runs on the same tensor, since a
one-step slice of a one-step input is the input), and :func:`one_step_layers` gives every
such layer a feed-forward that uses it. The clock's attention (:mod:`adapters.moshi.clock`)
uses it for the projections.
"""

from __future__ import annotations

import weakref
from typing import Any

from torch import Tensor

from adapters.moshi.vendor import replace_class

__all__ = ["one_step_layers", "per_step"]


def per_step(modules: Any, schedule: list[int] | None, x: Tensor, offset: int) -> Tensor:
    """The vendor's ``apply_weights_per_step(modules, schedule, x, offset)``, with no copy for
    a one-step ``x`` (``(B, 1, C)``)."""
    from moshi.modules.transformer import apply_weights_per_step

    if len(modules) == 1 or x.shape[1] != 1:
        vendor: Tensor = apply_weights_per_step(modules, schedule, x, offset)
        return vendor
    out: Tensor = modules[offset if schedule is None else schedule[offset]](x)
    return out


def one_step_layers(*models: Any) -> int:
    """Give every streaming transformer layer with weights per step under ``models`` the
    feed-forward that applies them with :func:`per_step`; the number of layers changed.

    As the clock, a layer keeps it only for the streaming state it was installed on (held
    weakly): outside it (not streaming, or ``streaming()`` entered again, as the vendor's own
    loop on the same model does) the vendor's feed-forward runs, so a peer stays the vendor's."""
    from moshi.modules.transformer import StreamingTransformerLayer

    changed = 0
    for model in models:
        for layer in model.modules():
            layered = isinstance(layer, StreamingTransformerLayer)
            if layered and layer.weights_per_step and layer.gating is not None:
                state = layer._streaming_state
                layer.one_step_state = (lambda: None) if state is None else weakref.ref(state)
                replace_class(layer, "OneStep", _ff_block=_ff_block)
                changed += 1
    return changed


def _ff_block(self: Any, x: Tensor) -> Tensor:
    """The vendor's gated feed-forward with weights per step (``_ff_block``), through
    :func:`per_step`."""
    state = self._streaming_state
    if state is None or state is not self.one_step_state():
        vendor: Tensor = self.vendor_class._ff_block(self, x)
        return vendor
    update = per_step(self.gating, self.weights_per_step_schedule, self.norm2(x), state.offset_cpu)
    out: Tensor = x.to(update) + self.layer_scale_2(update)
    return out

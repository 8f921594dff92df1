"""Kernels a call launches, counted on any device: ATen ops dispatched plus inductor's kernels.

:class:`OpCounter` is a ``TorchDispatchMode`` that counts every ATen op dispatched while it is
active (each eager op is one kernel or more on a GPU; views and metadata ops are counted
apart, as they launch nothing). A function compiled by inductor calls its generated kernels
without the dispatcher (and dynamo refuses to run under such a mode): :func:`count_call` has
each compiled piece of :mod:`adapters.minicpmo45.fused_step` run uncompiled outside the mode
and add what its compiled code launches: the kernels inductor generated for that signature
(``generated_kernel_count`` at its compile) and its GEMMs (extern ATen calls).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["COUNTING", "GEMMS", "OpCounter", "count_call"]

GEMMS = frozenset({"mm", "addmm", "bmm", "baddbmm", "linear", "matmul"})
"""ATen ops a compiled piece still calls as extern kernels (inductor's default mode)."""

COUNTING: list[Counter[str]] = []
"""While :func:`count_call` runs: its tally of the compiled pieces' kernels (the pieces run
uncompiled then, outside the dispatch mode, and add what their compiled code launches)."""

VIEWS = frozenset(
    {
        "view", "_unsafe_view", "reshape", "expand", "transpose", "t", "permute", "unsqueeze",
        "squeeze", "slice", "select", "split", "split_with_sizes", "chunk", "alias", "detach",
        "as_strided", "unbind", "lift_fresh", "_reshape_alias",
    }
)  # fmt: skip
"""Ops that only make a view (no kernel)."""


class OpCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """ATen ops dispatched while active: :attr:`ops` (every op by name), :attr:`kernels` (those
    that are not views)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:  # fmt: skip
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def kernels(self) -> int:
        return sum(n for name, n in self.ops.items() if name not in VIEWS)


def count_call(call: Callable[[], Any]) -> dict[str, Any]:
    """Run ``call`` once (warm: every compiled piece it uses already compiled) and count: the
    ATen ops it dispatched outside compiled code, the kernels of the compiled pieces it called,
    and their sum ``kernels``."""
    tally: Counter[str] = Counter()
    COUNTING.append(tally)
    try:
        with OpCounter() as counter, torch.no_grad():
            call()
    finally:
        COUNTING.pop()
    kernels = counter.kernels + tally["generated"] + tally["gemms"]
    return {
        "aten_kernels": counter.kernels,
        "aten_views": sum(counter.ops.values()) - counter.kernels,
        "compiled_generated": tally["generated"],
        "compiled_gemms": tally["gemms"],
        "kernels": kernels,
        "ops": dict(counter.ops.most_common()),
    }

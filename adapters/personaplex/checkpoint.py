"""PersonaPlex's LM from its checkpoint: the vendor's constructor at the declared arguments, the
weights from safetensors, a depformer stored for fewer steps widened to ``dep_q``.

The released checkpoint may hold its depformer for 8 steps (Moshi's), while PersonaPlex runs 16:
as PersonaPlex's own loader does, step ``8 + i`` takes step ``i``'s weights: the per-step
attention projections (stored stacked, ``in_proj_weight`` / ``out_proj.weight``) are repeated,
and a per-step module (``gating``, ``linears``, ``depformer_in``, ``depformer_emb``) missing for
a step of the second half is copied from the step ``dep_q / 2`` earlier. Any tensor still
missing is an error naming it; the vendor's load hook then splits the stacked projections.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from adapters.moshi.config import CheckpointError

__all__ = ["load_lm", "widen_depformer"]

_PER_STEP = re.compile(r"(?:^|\.)(gating|linears|depformer_in|depformer_emb)\.(\d+)\.")
_STACKED = ("self_attn.in_proj_weight", "self_attn.out_proj.weight")


def load_lm(path: Path, lm_kwargs: dict[str, Any], *, device: torch.device, dtype: Any) -> Any:
    """The LM at ``lm_kwargs`` with ``path``'s weights (widened; see the module docstring)."""
    from moshi.models import loaders
    from safetensors.torch import load_file

    with torch.device("meta"):
        lm = loaders.get_moshi_lm(None, lm_kwargs, device="meta", dtype=dtype)
    state = load_file(str(path), device="cpu")
    widen_depformer(state, lm)
    missing, _ = lm.load_state_dict(state, strict=False, assign=True)
    if missing:
        raise CheckpointError(
            f"{path.name} lacks {len(missing)} tensors the PersonaPlex LM needs (first: "
            f"{missing[0]}): use a download of nvidia/personaplex-7b-v1"
        )
    return lm.to(device=device, dtype=dtype).eval()


def widen_depformer(state: dict[str, torch.Tensor], lm: Any) -> int:
    """Widen ``state``'s depformer to ``lm.dep_q`` steps in place; the tensors added or grown."""
    steps = lm.dep_q
    expected = lm.state_dict()
    changed = 0
    for name, tensor in list(state.items()):
        if not name.startswith("depformer.") or not name.endswith(_STACKED):
            continue
        per_step = expected[_first_step(name)].shape[0]
        stored = tensor.shape[0] // per_step
        if stored < steps:
            if steps % stored:
                raise CheckpointError(
                    f"{name} holds {stored} depformer steps; {steps} is not a multiple of it"
                )
            state[name] = tensor.repeat(steps // stored, *([1] * (tensor.dim() - 1)))
            changed += 1
    for name in expected:
        if name in state or not (match := _PER_STEP.search(name)):
            continue
        step = int(match.group(2))
        if step < steps // 2:
            continue
        source = name[: match.start(2)] + str(step - steps // 2) + name[match.end(2) :]
        if source in state:
            state[name] = state[source]
            changed += 1
    return changed


def _first_step(stacked: str) -> str:
    """The model's name of step 0 of a stacked projection."""
    base = stacked.removesuffix("in_proj_weight").removesuffix("out_proj.weight")
    part = "in_projs" if stacked.endswith("in_proj_weight") else "out_projs"
    return f"{base}{part}.0.weight"

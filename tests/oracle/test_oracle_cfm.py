"""Our ``CausalConditionalCFM.forward_chunk`` equals the vendor's bit for bit over a stream.

Same random weights (ours loaded into the vendor's module with ``strict=True``), the same
``rand_noise`` (copied across: it is not a checkpoint key), the same inputs. The stream threads the
returned caches through as the vendor's flow does (the live envelope views, passed straight back),
copies a state out, runs a foreign call that overwrites both envelopes (FACTS.md: a stream must be
copied out before anything else runs on the module), resumes from the copy, and applies the
stock "prompt + 100" estimator trim. ``torch.equal`` on every mel and every returned cache (the
whole conv envelope, all 16 slots, and the attention view).

CPU: full-width DiT (the vendor's envelope is hard-coded to it), 2 solver steps, a 40-frame prompt,
and our envelope shrunk to the 190 frames the stream reaches (the vendor keeps its 16×1000 one;
the returned views are the same). GPU: the operating point, 10 steps, P = 302, full envelopes,
attended extents up to P + 100 + 50.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from adapters.token2wav.cfm import CausalConditionalCFM
from adapters.token2wav.dit import DiT
from adapters.weights import randomize_
from tests.oracle.vendor import require_vendor, vendor_dit, vendor_module

pytestmark = pytest.mark.oracle

RETAINED = 100
State = tuple[Tensor | None, Tensor | None]


def build_pair(device: str, envelope_frames: int) -> tuple[CausalConditionalCFM, Any]:
    require_vendor()
    cfm_module = vendor_module("cosyvoice2.flow.flow_matching")
    dit = DiT(envelope_frames=envelope_frames)
    randomize_(dit, seed=31)
    generator = torch.Generator().manual_seed(32)
    ours = CausalConditionalCFM(dit, 0.7, generator=generator, envelope_frames=envelope_frames)
    theirs = cfm_module.CausalConditionalCFM(vendor_dit(), inference_cfg_rate=0.7)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    theirs.rand_noise.copy_(ours.rand_noise)
    return ours.to(device).eval(), theirs.to(device).eval()


def trim(att: Tensor, prompt: int) -> Tensor:
    """The stock estimator trim (1.0.7 ``_trim_estimator_cache``): keep ``[:P] ‖ [-100:]``."""
    if att.shape[4] <= prompt + RETAINED:
        return att
    return torch.cat([att[:, :, :, :, :prompt], att[:, :, :, :, -RETAINED:]], dim=4)


def copied(state: State) -> State:
    """A stream's state copied out of the module's envelope."""
    cnn, att = state
    return (None if cnn is None else cnn.clone(), None if att is None else att.clone())


def run_stream(device: str, prompt: int, n_timesteps: int, envelope_frames: int) -> None:
    ours, theirs = build_pair(device, envelope_frames)
    generator = torch.Generator().manual_seed(33)

    def randn(*shape: int) -> Tensor:
        return torch.randn(shape, generator=generator).to(device)

    spks = randn(1, 80)
    states: dict[str, State] = {"ours": (None, None), "theirs": (None, None)}

    def call(frames: int, conditioned: bool, label: str) -> None:
        mu = randn(1, 80, frames)
        cond = randn(1, 80, frames) if conditioned else torch.zeros(1, 80, frames, device=device)
        # No clones: each module's returned views stay valid until that module runs again.
        results = {}
        modules: dict[str, Any] = {"theirs": theirs, "ours": ours}
        for key, module in modules.items():
            results[key] = module.forward_chunk(mu, spks, cond, n_timesteps, 1.0, *states[key])
        for name, a, b in zip(
            ("mel", "cnn", "att"), results["theirs"], results["ours"], strict=True
        ):
            assert a.shape == b.shape, f"{label}: {name} shape {b.shape} != vendor {a.shape}"
            assert torch.equal(a, b), f"{label}: {name} differs from the vendor"
        for key, (_, cnn, att) in results.items():
            states[key] = (cnn, trim(att, prompt))

    with torch.inference_mode():
        call(prompt, True, "prompt set-up")
        call(50, False, "steady 1")
        saved = {key: copied(state) for key, state in states.items()}
        states.update({"ours": (None, None), "theirs": (None, None)})
        call(prompt, True, "foreign stream overwriting the envelopes")
        states.update(saved)
        call(50, False, "steady 2, resumed from the copied-out state")
        call(50, False, "steady 3 (then trimmed)")
        call(16, False, "partial flush")


def test_cfm_stream_equals_vendor_cpu() -> None:
    run_stream("cpu", prompt=40, n_timesteps=2, envelope_frames=40 + RETAINED + 50)


@pytest.mark.gpu
def test_cfm_stream_equals_vendor_gpu() -> None:
    run_stream("cuda", prompt=302, n_timesteps=10, envelope_frames=1000)

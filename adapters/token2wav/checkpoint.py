"""Load Token2Wav from a checkpoint folder, or build it with seeded random weights.

A checkpoint folder (``<MiniCPM-o-4_5>/assets/token2wav/`` or Step-Audio-2-mini ``token2wav/``)
holds ``flow.yaml`` (the flow model's config, hyperpyyaml), ``flow.pt`` (its state_dict) and
``hift_original.pt`` (the original HiFT vocoder). Tensors are read with ``weights_only=True``;
``flow.yaml`` is read as data (nothing it names is imported or called).

The CFM's fixed noise (``decoder.rand_noise``, 1 × 80 × 30000) is not in ``flow.pt``: the vendor
draws it from the global CPU generator at construction, so its values depend on whatever ran
before. We draw it from ``seed`` instead, so a build is a function of its arguments; to match a
vendor process value for value, copy its ``rand_noise`` into ours.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from adapters.token2wav.cfm import ENVELOPE_STEPS, CausalConditionalCFM
from adapters.token2wav.config import (
    REQUIRED_FILES,
    CheckpointError,
    FlowConfig,
    check_folder,
    read_flow_config,
)
from adapters.token2wav.dit import ENVELOPE_FRAMES, DiT
from adapters.token2wav.encoder import UpsampleConformerEncoderV2
from adapters.token2wav.flow import CausalMaskedDiffWithXvec
from adapters.token2wav.hift import HiFTGenerator, build_hift, load_hift
from adapters.weights import load_state, randomize_

__all__ = ["REQUIRED_FILES", "CheckpointError", "build_flow", "load_token2wav"]


def build_flow(
    config: FlowConfig, *, seed: int = 0, envelope: bool = True
) -> CausalMaskedDiffWithXvec:
    """The flow model of ``config`` on the CPU in eval mode, noise drawn from ``seed``.

    Parameters hold placeholder initial values (load a state_dict or randomize them). The global
    generator is left untouched: module initialisers draw inside a forked RNG. ``envelope=False``
    leaves out the stock static cache envelopes (≈ 2.2 GB at full size): such a flow runs only
    under the state rule (arms S, SR, SRc).
    """
    estimator_config = config.decoder.estimator
    with torch.random.fork_rng(devices=[]):
        estimator = DiT(
            in_channels=estimator_config.in_channels,
            out_channels=estimator_config.out_channels,
            mlp_ratio=estimator_config.mlp_ratio,
            depth=estimator_config.depth,
            num_heads=estimator_config.num_heads,
            head_dim=estimator_config.head_dim,
            hidden_size=estimator_config.hidden_size,
            envelope_frames=ENVELOPE_FRAMES if envelope else None,
        )
        decoder = CausalConditionalCFM(
            estimator,
            config.decoder.inference_cfg_rate,
            generator=torch.Generator().manual_seed(seed),
            envelope_steps=ENVELOPE_STEPS if envelope else 0,
        )
        flow = CausalMaskedDiffWithXvec(
            UpsampleConformerEncoderV2(config.encoder),
            decoder,
            input_size=config.input_size,
            output_size=config.output_size,
            spk_embed_dim=config.spk_embed_dim,
            vocab_size=config.vocab_size,
        )
    return flow.eval()


def load_token2wav(
    folder: Path | None,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    config: FlowConfig | None = None,
    envelope: bool = True,
) -> tuple[CausalMaskedDiffWithXvec, HiFTGenerator]:
    """``(flow, hift)`` in eval mode on ``device``: from ``folder``, or random from ``seed``.

    With ``folder``: ``flow.yaml`` gives the config, ``flow.pt`` is loaded strictly,
    ``hift_original.pt`` through ``hift.load_hift``. With ``folder=None``: ``config`` (default: the
    released values) with every parameter drawn by ``randomize_(module, seed)``. ``dtype`` applies
    to the flow model only (the vocoder stays float32, as the vendor keeps it). Raises
    :class:`CheckpointError` for a missing folder or file, an unsupported ``flow.yaml`` value, and
    missing, unexpected or mis-shaped ``flow.pt`` keys.
    """
    if folder is None:
        flow = build_flow(config or FlowConfig(), seed=seed, envelope=envelope)
        randomize_(flow, seed)
        hift = build_hift(seed)
    else:
        folder = check_folder(Path(folder))
        flow = build_flow(read_flow_config(folder / "flow.yaml"), seed=seed, envelope=envelope)
        load_flow_state(flow, folder / "flow.pt")
        hift = load_hift(folder / "hift_original.pt")
    flow.to(device=device, dtype=dtype)  # in place: nn.Module.to returns the same module
    hift.to(device=device)
    return flow, hift


def load_flow_state(flow: nn.Module, path: Path) -> None:
    """Load the state_dict at ``path`` into ``flow`` strictly, with errors that name the keys."""
    state = load_state(path, CheckpointError)
    expected = flow.state_dict()
    missing = [key for key in expected if key not in state]
    unexpected = [key for key in state if key not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not match flow.yaml's model: missing keys {_few(missing)}, "
            f"unexpected keys {_few(unexpected)}; is flow.yaml from the same checkpoint?"
        )
    for key, value in state.items():
        if not isinstance(value, Tensor) or value.shape != expected[key].shape:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise CheckpointError(
                f"{path}: `{key}` has shape {got}, the model expects "
                f"{tuple(expected[key].shape)}; flow.yaml's sizes do not fit these weights"
            )
    flow.load_state_dict(state, strict=True)


def _few(keys: list[str], limit: int = 5) -> str:
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"[{', '.join(keys[:limit]) or 'none'}]{more}"

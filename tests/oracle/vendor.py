"""Import the vendor's own modules (minicpmo-utils 1.0.7) without running ``stepaudio2/__init__``.

The package ``__init__`` pulls torchaudio, onnxruntime sessions and hyperpyyaml; the modules we
compare against need only torch, einops and scipy. We register an empty package object with the
installed package's path, so ``import stepaudio2.cosyvoice2.flow.flow`` loads just that module
and its own imports.

Importing the vendor's ``upsample_encoder_v2`` changes process-wide ``torch._dynamo`` settings
(FACTS.md): run oracle comparisons in their own process (see :func:`run_isolated`).
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

VENDOR_PACKAGE = "stepaudio2"
VENDOR_DIST = "minicpmo-utils==1.0.7"


def vendor_available() -> bool:
    """True when the vendor package is installed (``.ci/run`` installs it with ``--no-deps``)."""
    if VENDOR_PACKAGE in sys.modules:  # already registered by vendor_module(): spec is None
        return True
    return importlib.util.find_spec(VENDOR_PACKAGE) is not None


def require_vendor() -> None:
    """Skip the calling test with the install command when the vendor package is absent."""
    if not vendor_available():
        pytest.skip(f"vendor oracle needs `pip install --no-deps {VENDOR_DIST}`")


def vendor_module(name: str) -> ModuleType:
    """Import ``stepaudio2.<name>`` while bypassing the package ``__init__`` files.

    Every intermediate package (``stepaudio2``, ``stepaudio2.cosyvoice2``, ...) is registered as a
    bare namespace module pointing at its folder, so only the leaf module's code runs.
    """
    root = _vendor_root()
    parts = name.split(".")
    for depth in range(len(parts)):
        package = ".".join([VENDOR_PACKAGE, *parts[:depth]])
        if package not in sys.modules:
            module = types.ModuleType(package)
            module.__path__ = [str(root.joinpath(*parts[:depth]))]
            sys.modules[package] = module
    return importlib.import_module(f"{VENDOR_PACKAGE}.{name}")


IMPORT_ONLY = (
    "s3tokenizer",
    "torchaudio",
    "torchaudio.compliance",
    "torchaudio.compliance.kaldi",
    "hyperpyyaml",
    "librosa",
    "librosa.filters",
)
"""Modules ``stepaudio2/token2wav.py`` imports at module level but its cache trims never call."""


def vendor_dit() -> Any:
    """The vendor's ``DiT`` at the released flow.yaml sizes (its class defaults differ)."""
    dit = vendor_module("cosyvoice2.flow.decoder_dit")
    return dit.DiT(
        in_channels=320,
        out_channels=80,
        mlp_ratio=4.0,
        depth=16,
        num_heads=8,
        head_dim=64,
        hidden_size=512,
    )


def vendor_flow(ours: Any) -> Any:
    """The vendor's ``CausalMaskedDiffWithXvec`` at the released sizes, holding ``ours``' weights
    (``strict=True``) and noise buffer, on ``ours``' device, in eval mode."""
    flow = vendor_module("cosyvoice2.flow.flow")
    cfm = vendor_module("cosyvoice2.flow.flow_matching")
    encoder = vendor_module("cosyvoice2.transformer.upsample_encoder_v2")
    theirs = flow.CausalMaskedDiffWithXvec(
        input_size=512,
        output_size=80,
        spk_embed_dim=192,
        output_type="mel",
        vocab_size=6561,
        encoder=encoder.UpsampleConformerEncoderV2(
            input_size=512,
            output_size=512,
            input_layer="linear",
            pre_lookahead_len=3,
            num_blocks=6,
            num_up_blocks=4,
            up_stride=2,
            up_scale_factor=2,
            attention_heads=8,
            key_bias=True,
            linear_units=2048,
        ),
        decoder=cfm.CausalConditionalCFM(vendor_dit(), inference_cfg_rate=0.7),
    )
    theirs.load_state_dict(ours.state_dict(), strict=True)
    theirs.decoder.rand_noise.copy_(ours.decoder.rand_noise)
    return theirs.to(ours.encoder_proj.weight.device).eval()


def vendor_token2wav() -> Any:
    """The vendor's ``Token2wav`` class, for its cache trims, with import-only stand-ins.

    ``stepaudio2/token2wav.py`` imports torchaudio, s3tokenizer, hyperpyyaml and librosa (through
    the vocoder modules) at module level; the trims never call them, so empty stand-ins are
    registered first (a fake at an import boundary, nothing more).
    """
    for name in IMPORT_ONLY:
        sys.modules.setdefault(name, types.ModuleType(name))
    modules: Any = sys.modules
    modules["hyperpyyaml"].load_hyperpyyaml = None
    modules["librosa.filters"].mel = None
    modules["torchaudio"].compliance = modules["torchaudio.compliance"]
    modules["torchaudio.compliance"].kaldi = modules["torchaudio.compliance.kaldi"]
    return vendor_module("token2wav").Token2wav


def _vendor_root() -> Path:
    loaded = sys.modules.get(VENDOR_PACKAGE)
    if loaded is not None:  # our bare package object: its spec is None, its path is set
        return Path(next(iter(loaded.__path__)))
    spec = importlib.util.find_spec(VENDOR_PACKAGE)
    assert spec is not None and spec.submodule_search_locations, (
        f"{VENDOR_PACKAGE} is not installed: pip install --no-deps {VENDOR_DIST}"
    )
    return Path(next(iter(spec.submodule_search_locations)))


def run_isolated(test_file: str, test_name: str, timeout_s: float = 900.0) -> None:
    """Run one test in a fresh interpreter (the vendor import mutates process-wide state).

    The child is an ordinary pytest run of ``test_file::test_name``; its output is shown on failure.
    """
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        f"{test_file}::{test_name}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, f"isolated oracle run failed:\n{done.stdout}\n{done.stderr}"

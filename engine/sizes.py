"""Bytes as people read them: one spelling for every message, card and footprint."""

from __future__ import annotations

__all__ = ["GIB", "MIB", "UNITS", "byte_text"]

MIB = 1 << 20
GIB = 1 << 30
UNITS = {"GiB": GIB, "MiB": MIB, "KiB": 1 << 10, "GB": 10**9, "MB": 10**6, "kB": 10**3}


def byte_text(n: float, unit: str = "GiB", digits: int = 1) -> str:
    """``n`` bytes in ``unit`` (a key of :data:`UNITS`) with ``digits`` after the point and
    thousands grouped: ``byte_text(15.2 * GIB)`` is ``"15.2 GiB"``."""
    return f"{n / UNITS[unit]:,.{digits}f} {unit}"

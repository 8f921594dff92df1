"""Declarations: a model family's clocks, regions, retention, constants and effects.

(Stub: the shared enums first; the loader and validator follow.)
"""

from __future__ import annotations

from enum import Enum


class Order(str, Enum):
    """Where a region's newest frames sit along its clock dimension.

    ``newest_first``: new frames are prepended (``cat([new, cache])``, the DiT estimator).
    ``oldest_first``: new frames are appended (``cat([cache, new])``, the conformer).
    """

    NEWEST_FIRST = "newest_first"
    OLDEST_FIRST = "oldest_first"

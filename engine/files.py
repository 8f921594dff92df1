"""Atomic file writes: a reader sees the old file or the whole new one, never a partial one.

Every file the project writes for a user (traces, exports, recordings, settings) goes through
:func:`atomic_write`: a temporary file beside the target, flushed and fsynced, then renamed over
it (``os.replace`` is atomic within one filesystem, hence "beside"). The temporary file is
removed if writing fails, and the result gets the ordinary mode the umask allows (``mkstemp``
makes it private).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write"]


def atomic_write(path: Path, write: Callable[[IO[Any]], object], *, text: bool = False) -> Path:
    """Call ``write`` on a temporary file beside ``path``, fsync it, rename it over ``path``.

    ``text=True`` opens it as UTF-8 text with newlines untranslated (CSV and JSON writers),
    otherwise as bytes. Returns ``path``.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it; set back at once
    os.umask(mask)
    return mask

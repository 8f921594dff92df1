"""Audio levels for the meters, read by the GUI at display rate without touching any ring.

Two kinds of reader, one protocol (:class:`LevelReader`):

* :class:`AttributeLevel` reads a device stream's ``level`` (peak dBFS of its last block, a
  float the PortAudio callback updates); a float read is atomic, so no lock and no ring access.
* :class:`EnvelopeLevel` serves sources and sinks without a ``level`` (WAV files, the null
  sink): the engine thread feeds each period's samples, the reader keeps their 20 ms block peaks
  and plays them back against the wall clock, so a whole period does not show as one flash.
  Periods that arrive faster than real time (an unpaced WAV) queue up to ``max_lag_s`` and
  older backlog is dropped, so the meter never lags the conversation by more than that.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

__all__ = ["FLOOR_DB", "AttributeLevel", "EnvelopeLevel", "LevelReader", "peak_db"]

FLOOR_DB = -90.0


def peak_db(samples: np.ndarray) -> float:
    """Peak level of float samples in dBFS (1.0 = 0 dBFS), floored at ``FLOOR_DB``."""
    if samples.size == 0:
        return FLOOR_DB
    peak = float(np.max(np.abs(samples)))
    return max(FLOOR_DB, 20.0 * math.log10(peak)) if peak > 0 else FLOOR_DB


class LevelReader(Protocol):
    def level_db(self) -> float: ...


class AttributeLevel:
    """The ``level`` attribute (dBFS) of an app.audio device stream."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def level_db(self) -> float:
        value = getattr(self._stream, "level", FLOOR_DB)
        try:
            level = float(value)
        except (TypeError, ValueError):
            return FLOOR_DB
        return level if math.isfinite(level) else FLOOR_DB


class EnvelopeLevel:
    """Block peaks of fed audio, replayed against the clock (see the module docstring)."""

    def __init__(
        self,
        rate: int,
        block_s: float = 0.02,
        max_lag_s: float = 1.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._block = max(1, int(rate * block_s))
        self._block_s = self._block / rate
        self._max_lag_s = max_lag_s
        self._clock = clock
        self._blocks: deque[tuple[float, float]] = deque()  # (start time, dBFS)
        self._end = 0.0
        self._lock = threading.Lock()

    def feed(self, samples: np.ndarray) -> None:
        """Queue one chunk's block peaks to play from the end of the previous chunk (or now)."""
        flat = np.asarray(samples, dtype=np.float32).reshape(-1)
        usable = flat.size - flat.size % self._block
        peaks = np.abs(flat[:usable]).reshape(-1, self._block).max(axis=1) if usable else []
        with self._lock:
            now = self._clock()
            if now <= self._end <= now + self._max_lag_s:
                start = self._end  # continue where the previous chunk ends
            else:  # idle, or too far behind: drop the backlog and play from now
                self._blocks.clear()
                start = now
            for peak in peaks:
                db = 20.0 * math.log10(float(peak)) if peak > 0 else FLOOR_DB
                self._blocks.append((start, max(FLOOR_DB, db)))
                start += self._block_s
            self._end = start

    def level_db(self) -> float:
        """The level of the block playing now (the floor when nothing is playing)."""
        with self._lock:
            now = self._clock()
            while len(self._blocks) > 1 and self._blocks[1][0] <= now:
                self._blocks.popleft()
            if not self._blocks:
                return FLOOR_DB
            start, db = self._blocks[0]
            if start > now or now >= start + self._block_s:
                return FLOOR_DB
            return db

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self._end = 0.0

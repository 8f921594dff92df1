"""Audio levels for the meters, read by the GUI at display rate without touching any ring.

Readers of one protocol (:class:`LevelReader`):

* :class:`AttributeLevel` reads a device stream's ``level``: the peak of the last block, which
  the PortAudio callback copies aside (never a ring) and the reader measures. No lock: a read
  that races the callback's copy mixes two blocks for one frame, which no meter can show.
* :class:`EnvelopeLevel` serves sources and sinks without a ``level`` (WAV files, the null
  sink): the engine thread feeds each period's samples, the reader keeps their 20 ms block peaks
  and plays them back against the wall clock, so a whole period does not show as one flash.
  Periods that arrive faster than real time (an unpaced WAV) queue up to ``max_lag_s`` and
  older backlog is dropped, so the meter never lags the conversation by more than that.
* :class:`HeardLevel` wraps a device's reader so the microphone meter shows what the model
  hears: the gain applied, and nothing while push-to-talk is released.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

from app.audio.rings import SILENCE_DBFS, peak_dbfs

__all__ = ["AttributeLevel", "EnvelopeLevel", "HeardLevel", "LevelReader"]


class LevelReader(Protocol):
    def level_db(self) -> float: ...


class AttributeLevel:
    """The ``level`` attribute (dBFS) of an app.audio device stream."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def level_db(self) -> float:
        value = getattr(self._stream, "level", SILENCE_DBFS)
        try:
            level = float(value)
        except (TypeError, ValueError):
            return SILENCE_DBFS
        return level if math.isfinite(level) else SILENCE_DBFS


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
        levels = [peak_dbfs(block) for block in flat[:usable].reshape(-1, self._block)]
        with self._lock:
            now = self._clock()
            if now <= self._end <= now + self._max_lag_s:
                start = self._end  # continue where the previous chunk ends
            else:  # idle, or too far behind: drop the backlog and play from now
                self._blocks.clear()
                start = now
            for db in levels:
                self._blocks.append((start, db))
                start += self._block_s
            self._end = start

    def level_db(self) -> float:
        """The level of the block playing now (the floor when nothing is playing)."""
        with self._lock:
            now = self._clock()
            while len(self._blocks) > 1 and self._blocks[1][0] <= now:
                self._blocks.popleft()
            if not self._blocks:
                return SILENCE_DBFS
            start, db = self._blocks[0]
            if start > now or now >= start + self._block_s:
                return SILENCE_DBFS
            return db

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self._end = 0.0


class HeardLevel:
    """A device microphone's level as the model hears it: shifted by the gain (capped at full
    scale), and the floor while push-to-talk holds the microphone closed."""

    def __init__(
        self, inner: LevelReader, gain_db: Callable[[], float], open_: Callable[[], bool]
    ) -> None:
        self._inner, self._gain_db, self._open = inner, gain_db, open_

    def level_db(self) -> float:
        if not self._open():
            return SILENCE_DBFS
        level = self._inner.level_db()
        return level if level <= SILENCE_DBFS else min(0.0, level + self._gain_db())

"""Meter ballistics without Qt: instant attack, smooth release, and a peak hold that decays.

Conventional peak-programme behaviour: the bar jumps up to a new level at once (a transient is
never missed) and falls at ``release_db_s``; the peak marker holds the highest level for
``hold_s`` and then decays at ``decay_db_s`` until the bar catches it. Time comes from the
caller, so a stalled timer makes the meter fall by the real elapsed time, not by one tick.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Ballistics"]


@dataclass
class Ballistics:
    floor_db: float = -60.0
    hold_s: float = 1.5
    decay_db_s: float = 15.0
    release_db_s: float = 36.0
    bar_db: float = -60.0
    peak_db: float = -60.0
    _peak_t: float = 0.0
    _last_t: float | None = None

    def update(self, level_db: float, now: float) -> tuple[float, float]:
        """Feed the level measured at ``now`` (seconds); returns (bar, peak) in dB."""
        level = max(self.floor_db, min(0.0, level_db))
        dt = 0.0 if self._last_t is None else max(0.0, now - self._last_t)
        self._last_t = now
        self.bar_db = max(level, self.bar_db - self.release_db_s * dt, self.floor_db)
        if level >= self.peak_db:
            self.peak_db, self._peak_t = level, now
        elif now - self._peak_t > self.hold_s:
            self.peak_db = max(self.bar_db, self.peak_db - self.decay_db_s * dt)
        return self.bar_db, self.peak_db

    def reset(self) -> None:
        self.bar_db = self.peak_db = self.floor_db
        self._peak_t, self._last_t = 0.0, None

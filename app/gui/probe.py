"""Event-loop latency: how late a periodic GUI timer fires, i.e. how long the window froze.

A ``QTimer`` asks to fire every ``interval_ms``; each time it fires the probe records how much
later than due it ran. Anything that blocks the GUI thread (a model load on the wrong thread, a
long paint) shows up as lateness. The status bar shows it, and the tests assert on it.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, QTimer

__all__ = ["LatencyProbe"]


class LatencyProbe(QObject):
    """Measures the GUI thread's responsiveness; ``max_ms``/``recent_ms`` read the lateness."""

    def __init__(self, interval_ms: int = 10, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.interval_s = interval_ms / 1e3
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._last: float | None = None
        self.samples: list[float] = []  # lateness in ms, one per tick
        self.max_ms = 0.0

    def start(self) -> None:
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        self._last = None

    def reset(self) -> None:
        self.samples.clear()
        self.max_ms = 0.0
        self._last = time.perf_counter() if self._timer.isActive() else None

    def recent_ms(self, n: int = 50) -> float:
        """The worst lateness over the last ``n`` ticks (0 before the first)."""
        return max(self.samples[-n:], default=0.0)

    def _tick(self) -> None:
        now = time.perf_counter()
        if self._last is not None:
            late = max(0.0, (now - self._last - self.interval_s) * 1e3)
            self.samples.append(late)
            if len(self.samples) > 100_000:  # an all-day session: keep the list bounded
                del self.samples[:50_000]
            self.max_ms = max(self.max_ms, late)
        self._last = now

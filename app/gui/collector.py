"""Garbage collection on the GUI thread only, on a timer (the recipe pyqtgraph documents).

Python's cyclic collector runs in whichever thread happens to allocate past a threshold. With
an engine thread that allocates all the time, that would often be the engine thread — and the
garbage it collects may hold Qt objects (a closed dialog, a replaced chart item), which only the
GUI thread may destroy. So while the window lives, automatic collection is off and this timer
collects, generation by generation against the usual thresholds, on the GUI thread.

What a finished session leaves in reference cycles is therefore freed here too (the controller
settles the heap, ``app.heap.settle_heap``, when a session ends); freeing a tensor only hands its
block back to torch's caching allocator (no kernel, no synchronize).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

__all__ = ["GuiThreadCollector"]

_active = 0  # live collectors (windows); collection is given back when the last one stops
_enabled_before = True


class GuiThreadCollector(QObject):
    """Turns automatic collection off and collects on a ``interval_ms`` timer instead."""

    def __init__(self, interval_ms: int = 500, parent: QObject | None = None) -> None:
        global _active, _enabled_before
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        if _active == 0:
            _enabled_before = gc.isenabled()
            gc.disable()
        _active += 1
        self._running = True
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.check)
        self._timer.start(interval_ms)

    def check(self) -> None:
        """Collect the generations whose allocation counts passed their thresholds."""
        counts = gc.get_count()
        if counts[0] <= self._thresholds[0]:
            return
        generation = 0
        if counts[1] > self._thresholds[1]:
            generation = 2 if counts[2] > self._thresholds[2] else 1
        gc.collect(generation)

    def stop(self) -> None:
        """Stop the timer; the last collector to stop gives collection back (idempotent)."""
        global _active
        if not self._running:
            return
        self._running = False
        self._timer.stop()
        _active -= 1
        if _active == 0 and _enabled_before:
            gc.enable()

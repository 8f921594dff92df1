"""The status bar's load progress, which keeps moving while a model loads.

A family reports its progress in a few steps (the basic voice sits at 20% for most of its half
minute), so between reports the bar would stand still and look hung. This bar also counts the
seconds, and where the same model was loaded here before it moves with the time against that
load's length ("12 s of about 31 s"), never past 99% before the model is ready.
"""

from __future__ import annotations

import time

from PySide6.QtWidgets import QLabel, QProgressBar

__all__ = ["STAGE_TEXT", "LoadProgress"]

STAGE_TEXT = {
    "loading": "Loading the model",
    "capture": "Warming up and capturing graphs",
    "reusing": "Reusing the loaded model",
}


class LoadProgress:
    """Drives ``bar`` and ``status`` from the family's reports and the clock."""

    def __init__(self, bar: QProgressBar, status: QLabel) -> None:
        self.bar, self.status = bar, status
        self.began: float | None = None
        self.expected_s: float | None = None
        self.stage, self.fraction = "loading", 0.0

    def begin(self, expected_s: float | None) -> None:
        """A load starts; ``expected_s``: how long this model's last load took here."""
        self.began, self.expected_s = time.monotonic(), expected_s
        self.stage, self.fraction = "loading", 0.0
        self.bar.setRange(0, 100)
        self.bar.setValue(0)
        self.bar.show()
        self.tick()

    def report(self, stage: str, fraction: float) -> None:
        self.stage, self.fraction = stage, max(0.0, min(1.0, fraction))
        self.tick()

    def elapsed_s(self) -> float:
        return 0.0 if self.began is None else time.monotonic() - self.began

    def tick(self) -> None:
        """Redraw (the window's timer calls it while loading)."""
        if self.began is None:
            return
        elapsed = self.elapsed_s()
        words = STAGE_TEXT.get(self.stage, self.stage)
        if self.expected_s:
            shown = max(self.fraction if self.stage == "loading" else 0.0,
                        min(0.99, elapsed / self.expected_s))  # fmt: skip
            detail = f"{elapsed:.0f} s of about {self.expected_s:.0f} s"
        else:
            shown = self.fraction
            detail = f"{elapsed:.0f} s"
        self.bar.setValue(round(100 * shown))
        self.bar.setFormat(f"{words} %p%")
        self.status.setText(f"{words}… {detail}")

    def end(self) -> float:
        """The load is over (ready, failed or stopped); returns its seconds."""
        elapsed = self.elapsed_s()
        self.began = None
        self.bar.hide()
        return elapsed

"""A one-line progress bar on stderr for the headless commands (``synth``, ``converse``)."""

from __future__ import annotations

import sys

__all__ = ["PeriodBar"]


class PeriodBar:
    """``name [####------] done/total periods, tail`` redrawn in place; without a total (an
    input device), just the count. ``close`` ends the line."""

    def __init__(self, name: str, total: int | None, width: int = 30) -> None:
        self.name, self.total, self.width, self.done = name, total, width, 0

    def update(self, tail: str) -> None:
        """One more period done; ``tail`` describes it (its time, phase, arm...)."""
        self.done += 1
        if self.total:
            filled = min(self.width, self.width * self.done // self.total)
            bar = "#" * filled + "-" * (self.width - filled)
            line = f"\r{self.name} [{bar}] {self.done}/{self.total} periods, {tail}"
        else:
            line = f"\r{self.name} {self.done} periods, {tail}"
        sys.stderr.write(line)
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()

    def interrupted(self, by: str = "Ctrl-C") -> None:
        """End the line: the run was stopped ``by`` (``Ctrl-C`` or ``SIGTERM``)."""
        sys.stderr.write(f"\n{self.name}: stopped after {self.done} periods ({by})\n")

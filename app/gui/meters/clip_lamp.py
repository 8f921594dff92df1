"""A lamp that lights when audio clipped and stays lit until the user clicks it (or a new
session starts): a clip lasts milliseconds, the lamp has to outlast the glance that misses it."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton, QWidget

__all__ = ["ClipLamp"]


class ClipLamp(QPushButton):
    """Feed it a running count with :meth:`show_count`; it lights when the count grows."""

    def __init__(self, text: str, what: str, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setObjectName("clipLamp")
        self._what = what
        self._seen = 0  # the count when the lamp was last cleared
        self._count = 0
        self.lit = False
        self.setAccessibleName(f"{text.lower()} lamp")
        self.clicked.connect(self.clear)
        self._restyle()

    def show_count(self, count: int) -> None:
        """The count since the session began (call :meth:`reset` when a new one starts)."""
        self._count = count
        lit = count > self._seen
        if lit != self.lit:
            self.lit = lit
            self._restyle()

    def clear(self) -> None:
        """Put the lamp out (the user has seen it); it lights again at the next clip."""
        self._seen = self._count
        if self.lit:
            self.lit = False
            self._restyle()

    def reset(self) -> None:
        self._seen = self._count = 0
        self.lit = False
        self._restyle()

    def _restyle(self) -> None:
        self.setProperty("lit", "true" if self.lit else "false")
        state = f"lit: {self._what}; click to clear" if self.lit else f"dark: no {self._what} yet"
        self.setToolTip(f"Lights and stays lit when {self._what}. Now {state}.")
        self.setAccessibleDescription(f"{'lit' if self.lit else 'dark'}: {self._what}")
        style = self.style()
        style.unpolish(self)
        style.polish(self)

"""One call gives a control its accessible name, its description and the same description as
its tooltip: what a screen reader says and what the mouse shows can then never disagree."""

from __future__ import annotations

from typing import TypeVar

from PySide6.QtWidgets import QWidget

__all__ = ["explain"]

_W = TypeVar("_W", bound=QWidget)


def explain(widget: _W, name: str, description: str) -> _W:
    """Name ``widget`` for assistive technology and explain it in one sentence; returns it."""
    widget.setAccessibleName(name)
    widget.setAccessibleDescription(description)
    widget.setToolTip(description)
    return widget

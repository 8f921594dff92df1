"""The settings dialog's role field: a family's role presets by name, or the user's own text.

Only a family with role presets (PersonaPlex: ``roles`` on its face) reads it; the field lists
the presets of every family that has them and keeps any text typed in.
"""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox

from adapters.registry import family
from app.gui.a11y import explain
from app.settings import FAMILIES

__all__ = ["role_field", "role_value"]


def role_field(current: str | None) -> QComboBox:
    """An editable list of the role presets, showing ``current`` (a preset or free text)."""
    combo = explain(
        QComboBox(), "role",
        "Who the assistant is (PersonaPlex): a preset, or type your own, e.g. 'You work for a "
        "bike shop and your name is Sam.' Empty: the family's default role.",
    )  # fmt: skip
    combo.setEditable(True)
    editor = combo.lineEdit()
    if editor is not None:
        explain(editor, "role text", "Type a role of your own, or pick a preset from the list.")
    presets = [name for key in FAMILIES for name in getattr(family(key), "roles", ())]
    combo.addItems(["", *dict.fromkeys(presets)])
    combo.setCurrentText(current or "")
    return combo


def role_value(combo: QComboBox) -> str | None:
    """The role the field holds; None when empty (the default role)."""
    return combo.currentText().strip() or None

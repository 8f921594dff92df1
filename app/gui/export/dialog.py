"""The export dialog: a folder (chosen with the file dialog), a file name, and what to write."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.export.writers import ExportKind, export_paths

__all__ = ["ExportDialog"]


class ExportDialog(QDialog):
    """Asks where and what to export; ``selection()`` reads the answer after ``exec()``.

    Exporting while a conversation runs is fine: the files are written on a pool thread.
    """

    def __init__(
        self,
        folder: Path,
        stem: str,
        *,
        has_trace: bool,
        has_audio: bool,
        has_transcript: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export session")
        self.setMinimumWidth(520)
        self.folder = QLineEdit(str(folder))
        self.stem = QLineEdit(stem)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.folder, 1)
        row.addWidget(browse)
        form = QFormLayout()
        form.addRow("Folder", row)
        form.addRow("File name", self.stem)
        self.boxes = _kind_boxes(
            has_trace=has_trace, has_audio=has_audio, has_transcript=has_transcript
        )
        for box in self.boxes.values():
            form.addRow("", box)
        self.preview = QLabel()
        self.preview.setObjectName("hint")
        self.preview.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.export_button = buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.preview)
        layout.addWidget(buttons)
        for box in self.boxes.values():
            box.toggled.connect(self._update)
        self.stem.textChanged.connect(self._update)
        self.folder.textChanged.connect(self._update)
        self._update()

    def selection(self) -> tuple[Path, str, list[ExportKind]]:
        kinds = [kind for kind, box in self.boxes.items() if box.isChecked() and box.isEnabled()]
        return Path(self.folder.text().strip()).expanduser(), self.stem.text().strip(), kinds

    def _browse(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Export to folder", self.folder.text())
        if chosen:
            self.folder.setText(chosen)

    def _update(self) -> None:
        folder, stem, kinds = self.selection()
        names = [p.name for p in export_paths(folder, stem or "?", kinds).values()]
        self.preview.setText("Writes " + ", ".join(names) if names else "Nothing selected")
        self.export_button.setEnabled(bool(kinds) and bool(stem))


def _kind_boxes(
    *, has_trace: bool, has_audio: bool, has_transcript: bool
) -> dict[ExportKind, QCheckBox]:
    """One check box per kind of file; what the session cannot give is unticked and disabled."""
    boxes: dict[ExportKind, QCheckBox] = {}
    for kind in ExportKind:
        box = QCheckBox(kind.label)
        if kind is ExportKind.TRANSCRIPT:
            available = has_transcript
            box.setToolTip(
                "What was said, a line per turn."
                if available
                else "Nothing was said in text: this model speaks without a transcript."
            )
        else:
            available = has_trace if kind.from_trace else has_audio
            box.setToolTip(f"Write the {kind.label.split(' (')[0].lower()}.")
        box.setAccessibleName(kind.label)
        box.setChecked(available)
        box.setEnabled(available)
        boxes[kind] = box
    return boxes

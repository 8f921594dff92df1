"""Render the app icon's SVG to the PNG shipped beside it (a build step, not part of the app).

Run after editing the SVG: ``QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/render_icon.py``.
Uses QtSvg from PySide6-Essentials, so no other SVG tool is needed. QtSvg implements SVG Tiny 1.2
and ignored a clip path in this icon, which is why it is drawn with plain paths only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ICONS = Path(__file__).resolve().parents[1] / "assets" / "icons"
APP_ID = "io.github.duplexcadence.DuplexCadence"


def render(svg: Path, png: Path, size: int) -> None:
    """Write ``svg`` as a ``size``×``size`` antialiased PNG with a transparent background."""
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg}: QtSvg cannot parse it; keep the icon to plain SVG Tiny paths")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    if not image.save(str(png)):
        raise SystemExit(f"{png}: could not write it; check the folder is writable")


def main() -> int:
    """Render the 256 px PNG (the size the desktop entry and AppStream catalog pick up)."""
    app = QGuiApplication(sys.argv[:1])  # QtSvg and QPainter expect a QGuiApplication
    render(ICONS / f"{APP_ID}.svg", ICONS / f"{APP_ID}.png", 256)
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())

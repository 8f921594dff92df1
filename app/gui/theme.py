"""Colours and the application style: a dark, quiet palette where the data carries the colour.

One place for every colour the app paints, so the meters, the charts and the state indicator
agree (speaking is always amber, listening always blue, the budget line always red).
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QLabel

BACKGROUND = "#17191d"
PANEL = "#1f2228"
PANEL_BORDER = "#2c3038"
TEXT = "#e4e6eb"
TEXT_DIM = "#8b919c"
ACCENT = "#4f9dff"
FOCUS = "#9ecbff"  # the keyboard focus ring: brighter than any control's own border

LISTEN = "#4f9dff"
SPEAK = "#ffb23e"
IDLE = "#5a606b"
LOADING = "#b48cff"

BUDGET = "#ff5c5c"
PROCESSING = "#4fd1a5"
OVER = "#ff5c5c"
HITS = "#4fd1a5"
CAPTURES = "#b48cff"
INVALIDATIONS = "#ff5c5c"
ARM_SWITCH = "#f2d15c"
# Misses by reason, then stages, then memory series: distinct hues in a fixed order.
SERIES = ("#ff8a5c", "#f2d15c", "#c77dff", "#5cc8ff", "#ff6fae", "#9be15d", "#a0a7b4")
STAGE_COLORS = {"backbone": "#5cc8ff", "flow": "#4fd1a5", "vocoder": "#ffb23e"}
MEMORY_COLORS = ("#5cc8ff", "#c77dff", "#ff8a5c", "#f2d15c")

METER_TROUGH = "#0f1114"
METER_LOW = "#3ecf8e"
METER_MID = "#f2d15c"
METER_HIGH = "#ff5c5c"
METER_PEAK = "#ffffff"

BANNER_BG = "#4a3a12"
BANNER_BORDER = "#a9822a"
BANNER_TEXT = "#ffe3a3"
ERROR = "#ff7b7b"

_STYLE = f"""
QMainWindow, QDialog {{ background: {BACKGROUND}; }}
QToolBar {{ background: {PANEL}; border: none; border-bottom: 1px solid {PANEL_BORDER};
           spacing: 6px; padding: 4px; }}
QFrame#card {{ background: {PANEL}; border: 1px solid {PANEL_BORDER}; border-radius: 6px; }}
QFrame#banner {{ background: {BANNER_BG}; border: 1px solid {BANNER_BORDER};
                border-radius: 6px; }}
QLabel#bannerText {{ color: {BANNER_TEXT}; font-weight: 600; }}
QLabel#cardTitle {{ color: {TEXT_DIM}; font-size: 8pt; font-weight: 600;
                   letter-spacing: 1px; }}
QLabel#value {{ color: {TEXT}; font-weight: 600; }}
QLabel#hint {{ color: {TEXT_DIM}; }}
QLabel#error {{ color: {ERROR}; }}
QPushButton#start {{ background: #2a6b3f; color: white; font-weight: 700; border-radius: 5px;
                     padding: 6px 16px; border: 1px solid #3a8a53; }}
QPushButton#start:hover {{ background: #33804b; }}
QPushButton#start[running="true"] {{ background: #7a2e2e; border: 1px solid #a04040; }}
QPushButton#start:disabled {{ background: #3a3d44; color: {TEXT_DIM}; border-color: #3a3d44; }}
QStatusBar {{ background: {PANEL}; color: {TEXT_DIM}; border-top: 1px solid {PANEL_BORDER}; }}
QProgressBar {{ background: {METER_TROUGH}; border: 1px solid {PANEL_BORDER}; border-radius: 3px;
               text-align: center; color: {TEXT}; max-height: 14px; }}
QProgressBar::chunk {{ background: {LOADING}; border-radius: 3px; }}
QPushButton#clipLamp {{ background: #2a2e35; color: {TEXT_DIM}; border: 1px solid {PANEL_BORDER};
                        border-radius: 3px; padding: 1px 6px; font-size: 8pt; font-weight: 700; }}
QPushButton#clipLamp[lit="true"] {{ background: #c62828; color: white; border-color: {OVER}; }}
QCheckBox::indicator {{ width: 14px; height: 14px; border: 1px solid {TEXT_DIM};
                        border-radius: 3px; background: #121417; }}
QCheckBox::indicator:checked {{ background: {ACCENT}; border-color: {ACCENT}; }}
QCheckBox::indicator:disabled {{ border-color: #4a4f58; background: {PANEL}; }}
QPushButton:focus, QToolButton:focus, QComboBox:focus, QLineEdit:focus, QSlider:focus,
QCheckBox:focus, QTextBrowser:focus, QPlainTextEdit:focus {{ border: 2px solid {FOCUS}; }}
QCheckBox:focus {{ border-radius: 3px; }}
"""


def palette() -> QPalette:
    """The dark palette (Fusion style reads it for every standard widget)."""
    p = QPalette()
    role = QPalette.ColorRole
    for r, colour in (
        (role.Window, BACKGROUND),
        (role.WindowText, TEXT),
        (role.Base, "#121417"),
        (role.AlternateBase, PANEL),
        (role.ToolTipBase, PANEL),
        (role.ToolTipText, TEXT),
        (role.Text, TEXT),
        (role.Button, "#2a2e35"),
        (role.ButtonText, TEXT),
        (role.BrightText, "#ffffff"),
        (role.Highlight, ACCENT),
        (role.HighlightedText, "#ffffff"),
        (role.Link, ACCENT),
        (role.PlaceholderText, TEXT_DIM),
    ):
        p.setColor(r, QColor(colour))
    disabled = QPalette.ColorGroup.Disabled
    for r in (role.Text, role.ButtonText, role.WindowText):
        p.setColor(disabled, r, QColor("#5f646d"))
    return p


def apply(app: QApplication) -> None:
    """Fusion + the dark palette + the style sheet, and pyqtgraph's matching defaults."""
    import pyqtgraph

    app.setStyle("Fusion")
    app.setPalette(palette())
    app.setStyleSheet(_STYLE)
    pyqtgraph.setConfigOptions(background=PANEL, foreground=TEXT_DIM, antialias=True)


def card_title(text: str) -> QLabel:
    """A card's small upper-case heading (styled by ``QLabel#cardTitle`` above)."""
    label = QLabel(text.upper())
    label.setObjectName("cardTitle")
    return label

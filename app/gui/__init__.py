"""The DuplexCadence desktop app (PySide6 + pyqtgraph), one folder per feature.

    worker/    the worker thread (owns the session and every torch/CUDA call), what crosses from it
    meters/    painted level meters with peak hold
    live/      the live panel: cadence, replay, captures, memory, stages per period
    settings/  the settings dialog, validated off the GUI thread
    export/    trace (Perfetto JSON, CSV, JSONL) and audio (WAV) export, atomic and off-thread
    window/    the main window, its toolbar, cards and banners

``main`` is what ``duplexcadence gui`` (and a launch without arguments) runs. Importing this
package imports neither Qt nor torch: ``main`` checks for a display first, because Qt aborts the
process (it cannot be caught) when its platform plugin finds no display.
"""

from __future__ import annotations

import os
import sys

__all__ = ["EXIT_NO_DISPLAY", "display_available", "main", "no_display_message"]

EXIT_NO_DISPLAY = 3


def display_available() -> bool:
    """Whether Qt can open a window here: a platform was forced (``QT_QPA_PLATFORM``, e.g.
    ``offscreen``), or on Linux/BSD an X11 or Wayland display is set; other systems always can."""
    if os.environ.get("QT_QPA_PLATFORM"):
        return True
    if sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def no_display_message() -> str:
    """What to do instead, for a launch with no display to open the window on."""
    return (
        "duplexcadence gui: no display (DISPLAY and WAYLAND_DISPLAY are unset). Run it in a "
        "desktop session, under a virtual display (xvfb-run -a duplexcadence gui), or converse "
        "without a window: duplexcadence demo (the shipped talk), or duplexcadence converse "
        "--headless --input in.wav --output out.wav"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the desktop app; returns the exit status (``EXIT_NO_DISPLAY`` without a display)."""
    args = list(sys.argv[1:] if argv is None else argv)
    wants_help = any(a in ("-h", "--help") for a in args)  # help needs no window
    if not wants_help and not display_available():
        print(no_display_message(), file=sys.stderr)
        return EXIT_NO_DISPLAY
    from app.gui.launch import run

    return run(args)

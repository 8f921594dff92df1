"""Start the desktop app: arguments, the QApplication, the style, the window, the event loop."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.gui.worker.routes import AudioRoute

if TYPE_CHECKING:
    from PySide6.QtWidgets import QApplication

__all__ = ["build_parser", "create_application", "run"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="duplexcadence gui",
        description="The DuplexCadence desktop app: converse, switch ablation arms live, "
        "watch cadence, replay and memory per period, export the session.",
    )
    parser.add_argument(
        "--input-wav", type=Path, metavar="WAV",
        help="use this sound file (any rate) as the microphone, e.g. to converse without one",
    )  # fmt: skip
    parser.add_argument(
        "--no-realtime", action="store_true",
        help="with --input-wav, run periods back to back instead of at the wall clock",
    )  # fmt: skip
    parser.add_argument(
        "--output", choices=("device", "none"), default="device",
        help="play the assistant on the output device (default), or only record it for export",
    )  # fmt: skip
    parser.add_argument(
        "--settings", type=Path, metavar="YAML",
        help="settings file (default: settings.yaml in the platform config folder)",
    )  # fmt: skip
    parser.add_argument("--start", action="store_true", help="start the conversation at launch")
    return parser


def create_application(argv: list[str]) -> QApplication:
    """The QApplication (created once per process), named and styled."""
    from PySide6.QtWidgets import QApplication

    from app.gui import theme

    # The engine thread runs Python too (model construction, the loop). Each time the GUI
    # thread comes back from a Qt call it waits for the interpreter lock up to the switch
    # interval; a chart repaint makes hundreds of such calls, so at the default 5 ms a paint
    # during the model build took 60-80 ms. At 1 ms it stays well inside a frame.
    sys.setswitchinterval(0.001)
    app = QApplication.instance()
    if app is None:
        app = QApplication([sys.argv[0] if sys.argv else "duplexcadence", *argv])
    QApplication.setApplicationName("DuplexCadence")
    QApplication.setOrganizationName("DuplexCadence")
    QApplication.setApplicationDisplayName("DuplexCadence")
    QApplication.setDesktopFileName("io.github.duplexcadence.DuplexCadence")
    assert isinstance(app, QApplication), (
        f"this process already runs a {type(app).__name__}: the app needs a QApplication"
    )
    theme.apply(app)
    _set_icon(app)
    return app


def _set_icon(app: QApplication) -> None:
    """The packaged icon, when the packaging step has rendered one (optional)."""
    from PySide6.QtGui import QIcon

    folder = Path(__file__).resolve().parents[2] / "assets" / "icons"
    for name in ("duplexcadence.svg", "io.github.duplexcadence.DuplexCadence.svg", "256.png"):
        if (folder / name).is_file():
            app.setWindowIcon(QIcon(str(folder / name)))
            return


def run(argv: list[str]) -> int:
    """Parse ``argv``, open the window, run the event loop; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.input_wav is not None and not args.input_wav.is_file():
        print(
            f"duplexcadence gui: --input-wav {args.input_wav} does not exist: pass a WAV file",
            file=sys.stderr,
        )
        return 2
    app = create_application([])
    from app.gui.window.main_window import MainWindow

    route = AudioRoute(input_wav=args.input_wav, realtime=not args.no_realtime, output=args.output)
    window = MainWindow(settings_file=args.settings, route=route)
    window.show()
    if args.start:
        window.start_conversation()
    return app.exec()

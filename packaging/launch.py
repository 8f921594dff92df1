"""Entry point of the PyInstaller bundle: the ``duplexcadence`` command, the desktop app by default.

Launched with no arguments (from the desktop entry, a file manager or a double click) it opens the
window, as ``duplexcadence gui`` does; with arguments it is the full command line, so
``dist/duplexcadence/duplexcadence plan minicpmo45_token2wav`` works from the bundle too.
"""

from __future__ import annotations

import multiprocessing
import sys

from app.cli import main

if __name__ == "__main__":
    # A frozen app must call this first, or a child process started with "spawn" would re-run
    # the whole app instead of its target.
    multiprocessing.freeze_support()
    sys.exit(main(sys.argv[1:] or ["gui"]))

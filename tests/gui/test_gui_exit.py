"""Quitting mid-conversation (Ctrl+Q) ends the process cleanly: exit status 0, the engine
thread joined, the model's threads ended, nothing aborting as the interpreter exits ("terminate
called without an active exception", "QThread: Destroyed while thread is still running").

Its own process, as a user runs the app: an abort at exit cannot be seen from inside pytest's.
The small synthetic model, and the basic voice (where its packages are installed) quit while it
answers: its worker thread, inside a native model call, is what aborted the exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gui.conftest import small_cpu_settings

pytestmark = pytest.mark.gui

ROOT = Path(__file__).resolve().parents[2]

# The app as `duplexcadence gui --input-wav TALK --output none --start` builds it, and Ctrl+Q
# (the Quit action) pressed once two periods have played.
DRIVER = """
import sys
from pathlib import Path
from PySide6.QtCore import QTimer
from app.gui.launch import create_application
from app.gui.window.main_window import MainWindow
from app.gui.worker.routes import AudioRoute

settings, talk, sessions = (Path(arg) for arg in sys.argv[1:4])
answering = sys.argv[4] == "answering"
app = create_application([])
window = MainWindow(
    settings_file=settings, route=AudioRoute(input_wav=talk, output="none"), sessions_dir=sessions
)
window.show()
window.start_conversation()

def quit_mid_session():
    if window.controller.state.value != "running" or len(window.panel.history) < 2:
        return
    if not answering or "You:" in window.transcript.text():
        print("quitting while running", flush=True)
        if sys.argv[5] == "destroy":  # no close request: the window is simply gone
            timer.stop()
            window.deleteLater()
        else:
            window.quit_action.trigger()

timer = QTimer()
timer.timeout.connect(quit_mid_session)
timer.start(50)
sys.exit(app.exec())
"""


@pytest.mark.parametrize(
    ("family", "how"), [("synthetic", "quit"), ("basic", "quit"), ("synthetic", "destroy")]
)
def test_quitting_mid_conversation_exits_cleanly(
    tmp_path: Path, talk_wav: Path, family: str, how: str
) -> None:
    """Ctrl+Q, or the window destroyed without a close request (no window, no process: the
    conversation ends and the process exits, where it used to go on listening and answering)."""
    from app.settings import save_settings

    if family == "basic":
        from adapters.basic.shipped import check_installed

        try:
            check_installed()
        except RuntimeError as error:
            pytest.skip(str(error))
    settings = save_settings(small_cpu_settings(family=family), tmp_path / "settings.yaml")
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PYTHONPATH": str(ROOT),
    }
    argv = [sys.executable, "-c", DRIVER, str(settings), str(talk_wav), str(tmp_path / "s")]
    argv += ["answering" if family == "basic" else "any", how]
    # A hang guard under pytest's 600 s: the basic voice alone loads in ~25 s on two idle cores
    # but 160 s at load 4 (tests/test_basic_speakers.py), before its first answer.
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=540, check=False
    )
    assert "quitting while running" in done.stdout, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    for abort in ("terminate called", "Aborted", "QThread: Destroyed"):
        assert abort not in done.stderr, done.stderr[-3000:]
    assert list((tmp_path / "s").glob("session-*.jsonl")), "the session's trace is kept"

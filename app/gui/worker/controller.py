"""The GUI thread's handle on conversations: start, stop, steer, and what the last one left.

One :class:`EngineController` lives in the window. ``start`` spawns an
:class:`~app.gui.worker.worker.EngineThread`; the controller forwards its signals, tracks the
state (idle → loading → running → stopping → idle) and keeps the finished session's trace and
recorder so an export still works after Stop, and the model it left loaded
(:class:`~app.gui.worker.keep.KeptModel`), which the next Start with the same family and
settings reuses. It never calls into torch or a ring itself.
"""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.audio.rings import SILENCE_DBFS
from app.gui.worker.clip import ClipCounts
from app.gui.worker.controls import AudioControls
from app.gui.worker.feed import Feed
from app.gui.worker.keep import KeptModel
from app.gui.worker.recorder import AudioRecorder
from app.gui.worker.routes import AudioRoute
from app.gui.worker.worker import EngineThread, SessionInfo
from app.heap import settle_heap
from app.settings import Settings
from app.transcript import Transcript
from engine.arms import Arm

__all__ = ["EngineController", "EngineState", "default_sessions_dir"]


class EngineState(StrEnum):
    IDLE = "idle"
    LOADING = "loading"
    RUNNING = "running"
    STOPPING = "stopping"


def default_sessions_dir() -> Path:
    """Where session traces go: ``<user data dir>/duplexcadence/sessions`` (created on demand)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("duplexcadence")) / "sessions"


def _new_trace_path(folder: Path) -> Path:
    """``folder/session-<date>-<time>.jsonl`` (folder created), never an existing file's name."""
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / time.strftime("session-%Y%m%d-%H%M%S.jsonl")
    suffix = 1
    while trace.exists():  # two starts in one second: never clobber a trace
        trace = folder / time.strftime(f"session-%Y%m%d-%H%M%S-{suffix}.jsonl")
        suffix += 1
    return trace


class EngineController(QObject):
    """Starts and stops the engine thread and relays what it reports.

    Args:
        sessions_dir: the folder for session traces (None: :func:`default_sessions_dir`).
    """

    state_changed = Signal(str)  # EngineState value
    progress = Signal(str, float)
    ready = Signal(object)  # SessionInfo
    failed = Signal(str)
    ended = Signal(str)

    def __init__(self, sessions_dir: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.feed = Feed()
        self.controls = AudioControls()  # volume, mute, mic gain: shared with every session
        self.state = EngineState.IDLE
        self.info: SessionInfo | None = None
        self.trace: Path | None = None
        self._sessions_dir = sessions_dir
        self._thread: EngineThread | None = None
        self._recorder: AudioRecorder | None = None
        self._clips = ClipCounts()
        self._transcript: Transcript | None = None
        self.kept: KeptModel | None = None  # the model the last conversation left loaded

    # -- commands (GUI thread) ---------------------------------------------------------------

    def start(self, settings: Settings, route: AudioRoute) -> None:
        """Build and run a session on a new engine thread; progress and readiness by signal."""
        if self.state is not EngineState.IDLE:
            raise RuntimeError(f"a conversation is {self.state.value}: stop it before starting")
        self.trace = _new_trace_path(self._sessions_dir or default_sessions_dir())
        self.info, self._recorder, self._transcript = None, None, None
        self.feed.clear()
        thread = EngineThread(
            settings, route, self.trace, self.feed, self.controls, kept=self.kept, parent=self
        )
        self.kept = None  # the thread's now: it reuses or closes it
        thread.progress.connect(self.progress)
        thread.ready.connect(self._on_ready)
        thread.failed.connect(self.failed)
        thread.ended.connect(self._on_ended)
        thread.finished.connect(thread.deleteLater)
        self._thread = thread
        self._set_state(EngineState.LOADING)
        thread.start()

    def stop(self) -> None:
        """Ask the running (or loading) session to end; ``ended`` follows within one period."""
        if self._thread is not None and self.state in (EngineState.LOADING, EngineState.RUNNING):
            self._thread.request_stop()
            self._set_state(EngineState.STOPPING)

    def request_arm(self, arm: Arm) -> None:
        """Switch the arm at the next period of the running session (no-op when idle)."""
        if self._thread is not None:
            self._thread.request_arm(arm)

    def set_push_to_talk(self, held: bool) -> None:
        if self._thread is not None:
            self._thread.set_push_to_talk(held)

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Stop and wait for the engine thread, then unload the kept model (window close);
        False if the thread did not end in time."""
        thread = self._thread
        if thread is not None:
            thread.request_stop()
            if not thread.wait(int(timeout_s * 1000)):
                return False
            self.kept = thread.kept if self.kept is None else self.kept
            thread.kept = None
        self.unload()
        return True

    def unload(self) -> None:
        """Close the model kept between conversations (idle only; the next Start loads)."""
        kept, self.kept = self.kept, None
        if kept is not None:
            kept.close()

    # -- what the GUI reads ------------------------------------------------------------------

    @property
    def recorder(self) -> AudioRecorder | None:
        """The running or last session's audio (for export), or None before any session."""
        if self._thread is not None and self._thread.recorder is not None:
            return self._thread.recorder
        return self._recorder

    @property
    def transcript(self) -> Transcript | None:
        """The running or last session's transcript (for export), or None before any."""
        if self._thread is not None:
            return self._thread.transcript
        return self._transcript

    def levels_db(self) -> tuple[float, float]:
        """(input, output) meter levels in dBFS now; the floor when no session runs."""
        thread = self._thread
        if thread is None or self.state is not EngineState.RUNNING:
            return SILENCE_DBFS, SILENCE_DBFS
        inp, out = thread.input_level, thread.output_level
        return (
            inp.level_db() if inp is not None else SILENCE_DBFS,
            out.level_db() if out is not None else SILENCE_DBFS,
        )

    def clip_counts(self) -> ClipCounts:
        """The running or last session's clip counts (zeros before any session)."""
        thread = self._thread
        return thread.clips if thread is not None else self._clips

    # -- engine thread reports (queued to the GUI thread) ----------------------------------

    def _on_ready(self, info: SessionInfo) -> None:
        self.info = info
        if self.state is EngineState.LOADING:
            self._set_state(EngineState.RUNNING)
        self.ready.emit(info)

    def _on_ended(self, reason: str) -> None:
        thread = self._thread
        if thread is not None:
            thread.wait()  # run() has returned; this only joins the OS thread
            self._recorder, self._clips = thread.recorder, thread.clips
            self._transcript = thread.transcript
            self.kept, thread.kept = thread.kept, None
        self._thread = None
        # GUI thread, between sessions: the ended session's cycles (~25k objects for the small
        # model) go now, while the user is stopping; what survives is hidden from later walks.
        settle_heap()
        self._set_state(EngineState.IDLE)
        self.ended.emit(reason)

    def _set_state(self, state: EngineState) -> None:
        if state is not self.state:
            self.state = state
            self.state_changed.emit(state.value)

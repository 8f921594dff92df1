"""The engine thread: the one thread that builds the session and makes every torch/CUDA call.

DESIGN.md ("Threads in the app"): the engine thread pulls one native period of input, runs the
full-duplex step, hands the PCM to the output, and publishes plain-Python records; the GUI
thread only draws what it pulls at display rate. So this module is the only GUI code that
imports ``app.session`` (and through it torch), and it does so inside :meth:`EngineThread.run`.

What crosses threads, and how:
    * progress, ready, failure and end: Qt signals (queued to the GUI thread);
    * per-period records: :class:`~app.gui.worker.feed.Feed` (a locked deque the GUI drains);
    * audio for export: :class:`~app.gui.worker.recorder.AudioRecorder` (locked, snapshotted);
    * meter levels: the readers of :class:`~app.gui.worker.routes.OpenedAudio` (floats);
    * stop, arm and push-to-talk requests from the GUI: a ``threading.Event`` and the session's
      own any-thread methods (``request_arm``, ``set_push_to_talk``).
A stop takes effect at the end of the period in flight (at most one native period).
"""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QThread, Signal

from app.gui.worker.feed import Feed, PeriodView
from app.gui.worker.levels import LevelReader
from app.gui.worker.recorder import AudioRecorder
from app.gui.worker.routes import AudioRoute, OpenedAudio, open_audio
from app.heap import freeze_heap
from app.settings import Settings
from engine.arms import Arm

if TYPE_CHECKING:
    from app.session import Session

__all__ = ["EngineThread", "SessionInfo", "describe_error"]


@dataclass(frozen=True)
class SessionInfo:
    """What the window shows about a running session (plain values, built on the engine thread)."""

    model_name: str
    device: str
    weights_synthetic: bool
    arm: str
    period_s: float
    input_rate: int
    output_rate: int
    input_label: str
    output_label: str
    trace: Path | None


def describe_error(exc: BaseException) -> str:
    """One message for the user: the exception's own text (ours name the fix) and its kind."""
    text = str(exc).strip() or repr(exc)
    return f"{type(exc).__name__}: {text}"


class EngineThread(QThread):
    """Builds a session from settings, then runs it period by period until stopped.

    Args:
        settings: what to build (read on this thread only).
        route: where the audio comes from and goes to.
        trace: the session's JSONL trace path (None: no trace, and no trace export).
        feed: where period views go for the GUI.
        parent: the owning QObject (the controller), so Qt deletes the thread with it.
    """

    progress = Signal(str, float)  # stage ("loading", "capture", ...), fraction 0..1
    ready = Signal(object)  # SessionInfo, once the session is built and the audio open
    failed = Signal(str)  # a message naming the fix; the thread ends after it
    ended = Signal(str)  # why it ended: "stopped", "input ended", or "failed"

    def __init__(
        self,
        settings: Settings,
        route: AudioRoute,
        trace: Path | None,
        feed: Feed,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._settings = settings
        self._route = route
        self._trace = trace
        self.feed = feed
        self.recorder: AudioRecorder | None = None
        self.input_level: LevelReader | None = None
        self.output_level: LevelReader | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._pending_arm: Arm | None = None
        self._push_to_talk_held = False

    # -- any thread ------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the loop to end after the period in flight (or right after the build)."""
        self._stop.set()

    def request_arm(self, arm: Arm) -> None:
        """Switch the ablation arm at the next period (held until the session exists)."""
        with self._lock:
            if self._session is not None:
                self._session.request_arm(arm)
            else:
                self._pending_arm = arm

    def set_push_to_talk(self, held: bool) -> None:
        """Gate the microphone (half-duplex mode): only periods with the key held are heard."""
        with self._lock:
            self._push_to_talk_held = held
            if self._session is not None:
                self._session.set_push_to_talk(held)

    # -- engine thread ---------------------------------------------------------------------

    def run(self) -> None:
        session: Session | None = None
        audio: OpenedAudio | None = None
        reason = "failed"
        try:
            session = self._build()
            if session is None:
                reason = "stopped"
                return
            audio = open_audio(self._route, self._settings, session.input_rate, session.output_rate)
            self.input_level, self.output_level = audio.input_level, audio.output_level
            self.recorder = AudioRecorder(session.input_rate, session.output_rate)
            self._publish(session)
            self.ready.emit(self._info(session, audio))
            reason = self._loop(session, audio, self.recorder)
        except Exception as exc:  # every failure reaches the user; the app keeps running
            traceback.print_exc()
            self.failed.emit(describe_error(exc))
        finally:
            with self._lock:
                self._session = None
            if audio is not None:
                audio.close()
            if session is not None:
                session.close()
            self.ended.emit(reason)

    def _build(self) -> Session | None:
        from app.session import build_session  # torch loads here, on this thread, never the GUI's

        # What the imports made (torch, the adapters, Qt: ~170k objects) lives as long as the
        # process: hidden from the GUI thread's collections during the model build (app.heap).
        freeze_heap()
        session = build_session(self._settings, trace=self._trace, progress=self.progress.emit)
        if self._stop.is_set():  # stopped while loading: do not open devices
            session.close()
            return None
        return session

    def _publish(self, session: Session) -> None:
        """Make the session reachable from other threads and apply what they asked meanwhile."""
        with self._lock:
            self._session = session
            if self._pending_arm is not None:
                session.request_arm(self._pending_arm)
                self._pending_arm = None
            if self._push_to_talk_held:
                session.set_push_to_talk(True)

    def _loop(self, session: Session, audio: OpenedAudio, recorder: AudioRecorder) -> str:
        samples = round(session.period_s * session.input_rate)
        while not self._stop.is_set():
            mic = audio.source.read_period(samples)
            if mic is None:
                return "input ended"
            outcome = session.step(mic)
            view = PeriodView.from_outcome(outcome)
            if view.barge_in:
                audio.interrupt()  # the user spoke over the assistant: drop what still queues
            audio.sink.write(outcome.pcm)
            recorder.add(mic, outcome.pcm)
            audio.feed_levels(mic, outcome.pcm)
            self.feed.push(view)
        return "stopped"

    def _info(self, session: Session, audio: OpenedAudio) -> SessionInfo:
        return SessionInfo(
            model_name=str(session.model_name),
            device=str(session.device),
            weights_synthetic=bool(session.weights_synthetic),
            arm=str(session.arm),
            period_s=float(session.period_s),
            input_rate=int(session.input_rate),
            output_rate=int(session.output_rate),
            input_label=audio.input_label,
            output_label=audio.output_label,
            trace=self._trace,
        )

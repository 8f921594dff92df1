"""The engine thread: the one thread that builds the session and makes every torch/CUDA call.

docs/architecture.md ("Threads in the app"): the engine thread pulls one native period of
input, runs the full-duplex step, hands the PCM to the output, and publishes plain-Python
records; the GUI thread only draws what it pulls at display rate. So this module is the only
GUI code that imports ``app.session`` (and through it torch), and it does so inside
:meth:`EngineThread.run`.

What crosses threads, and how:
    * progress, ready, failure and end: Qt signals (queued to the GUI thread);
    * per-period records: :class:`~app.gui.worker.feed.Feed` (a locked deque the GUI drains);
    * audio for export: :class:`~app.gui.worker.recorder.AudioRecorder` (locked, snapshotted);
    * meter levels: the readers of :class:`~app.gui.worker.routes.OpenedAudio` (floats);
    * volume, mute and microphone gain: :class:`~app.gui.worker.controls.AudioControls`, read
      once per period; clip counts back as :class:`~app.gui.worker.clip.ClipCounts`;
    * stop, arm and push-to-talk requests from the GUI: a ``threading.Event`` and the session's
      own any-thread methods (``request_arm``, ``set_push_to_talk``).
A stop takes effect at the end of the period in flight (at most one native period).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject, QThread, Signal

from app.audio.devices import AudioError
from app.audio.limiter import RANDOM_WEIGHTS_TRIM_DB, MicStage, OutputStage
from app.gui.worker.clip import ClipCounts
from app.gui.worker.controls import AudioControls
from app.gui.worker.feed import Feed, PeriodView
from app.gui.worker.keep import KeptModel
from app.gui.worker.levels import HeardLevel, LevelReader
from app.gui.worker.preflight import StartError, check_before_loading
from app.gui.worker.recorder import AudioRecorder
from app.gui.worker.routes import AudioRoute, OpenedAudio, open_audio
from app.heap import freeze_heap
from app.response import ResponseMeter, response_facts
from app.settings import Settings
from app.transcript import LiveFile, Transcript, audio_time, transcript_path
from engine.arms import Arm
from engine.sizes import byte_text

if TYPE_CHECKING:
    from app.session import Session

__all__ = ["EngineThread", "SessionInfo", "describe_error"]


@dataclass(frozen=True)
class SessionInfo:
    """What the window shows about a running session (plain values, built on the engine thread)."""

    model_name: str
    device: str
    accelerator: str  # "NVIDIA H200, 139.8 GiB", or "CPU" (graphs are then not launched)
    weights_synthetic: bool
    output_trim_db: float  # below the volume: RANDOM_WEIGHTS_TRIM_DB for random weights
    arm: str
    period_s: float
    input_rate: int
    output_rate: int
    input_label: str
    output_label: str
    trace: Path | None
    switchable_arms: tuple[str, ...] = ()  # the arms it can switch to live (() : none apply)
    replays: bool = True  # it has a replay engine (else the replay and capture charts are empty)
    has_text: bool = False  # the model says text beside its speech
    says_words: bool = False  # ... in words (random weights have no vocabulary: no words)
    stages: tuple[str, ...] = ()  # the stages its periods time
    reused_s: float | None = None  # a kept model was reused: the load it saved, in seconds


def _dropouts(audio: OpenedAudio) -> int:
    """Device dropouts so far: output underruns and dry spells, input overflows (a file and
    the null sink have none)."""
    total = 0
    for end in (audio.source, audio.sink):
        stats = getattr(end, "stats", None)
        if stats is not None:
            total += int(stats.underflows) + int(stats.overflows) + int(stats.dry_events)
    return total


def _accelerator(device: str) -> str:
    """The GPU's name and memory for a CUDA device (engine thread: it asks torch)."""
    if not device.startswith("cuda"):
        return "CPU"
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    return f"{props.name}, {byte_text(props.total_memory)}"


def describe_error(exc: BaseException) -> str:
    """One message for the user: the exception's own text (ours name the fix), never its
    class; the traceback goes to the terminal."""
    text = str(exc).strip()
    if not text:
        return "the engine stopped unexpectedly; the terminal shows the details"
    return text[0].upper() + text[1:]


class EngineThread(QThread):
    """Builds a session from settings, then runs it period by period until stopped.

    Args:
        settings: what to build (read on this thread only).
        route: where the audio comes from and goes to.
        trace: the session's JSONL trace path (None: no trace, and no trace export).
        feed: where period views go for the GUI.
        controls: volume, mute and microphone gain, read each period (None: the defaults).
        kept: the model the last conversation left loaded (reused when its key matches, else
            closed); afterwards ``kept`` holds the model for the next one (None: unloaded).
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
        controls: AudioControls | None = None,
        kept: KeptModel | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.kept = kept
        self._reused_s: float | None = None
        self.controls = controls or AudioControls()
        self.clips = ClipCounts()
        self.transcript = Transcript()  # what was said; kept beside the trace as it grows
        self._file: LiveFile | None = None
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
        self._in_step = False  # inside session.step: a failure there unloads the model

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
            if audio.input_envelope is None:  # a device meters itself: show what the model hears
                self.input_level = HeardLevel(
                    audio.input_level, lambda: self.controls.mic_gain_db, self._mic_open
                )
            self.recorder = AudioRecorder(session.input_rate, session.output_rate)
            if self._trace is not None:
                self._file = LiveFile(self.transcript, transcript_path(self._trace))
            self._publish(session)
            self.ready.emit(self._info(session, audio))
            reason = self._loop(session, audio, self.recorder)
        except (StartError, AudioError) as exc:  # worded for the window: no traceback needed
            self.failed.emit(describe_error(exc))
        except Exception as exc:  # every failure reaches the user; the app keeps running
            traceback.print_exc()
            self.failed.emit(describe_error(exc))
        finally:
            with self._lock:
                self._session = None
            if audio is not None:
                audio.close()
            if self._file is not None:
                self._file.close()  # what is left of the transcript, beside the trace
            self._end(session, failed=reason == "failed")
            self.ended.emit(reason)

    def _end(self, session: Session | None, failed: bool) -> None:
        """Close the session; keep its model for the next Start unless this one failed (a
        model that raised mid-period may hold half a step: it is unloaded)."""
        keep = not (failed and self._in_step) and self.kept is not None
        if session is not None:
            session.close(keep_model=keep)
        if not keep and self.kept is not None:
            self.kept.close()
            self.kept = None

    def _build(self) -> Session | None:
        # Devices and the checkpoint first: a missing microphone is said in a second, not
        # after the model load.
        check_before_loading(self._settings, self._route.input_wav, self._route.output == "device")
        # torch loads here, on this thread, never the GUI's
        from app.session import load_model, model_key, open_session
        from engine.trace import check_trace_path

        if self._trace is not None:
            check_trace_path(self._trace, overwrite=True)
        key, kept = model_key(self._settings), self.kept
        if kept is not None and kept.key != key:  # another model: free this one's memory first
            kept.close()
            self.kept = kept = None
        if kept is None:
            # What the imports made (torch, the adapters, Qt: ~170k objects) lives as long as
            # the process: hidden from the GUI thread's collections during the build (app.heap).
            freeze_heap()
            began = time.monotonic()
            loaded = load_model(self._settings, progress=self.progress.emit)
            kept = self.kept = KeptModel(key, loaded, load_s=time.monotonic() - began)
            fresh = True
        else:
            self._reused_s = kept.load_s
            self.progress.emit("reusing", 1.0)
            fresh = False
        warmed = None if fresh else kept.warmed  # fresh: the load warmed the settings' arm
        session = open_session(
            kept.loaded, self._settings, trace=self._trace, fresh=fresh, warmed=warmed
        )
        kept.warmed = session.warmed  # the arms whose graphs this model holds, shared
        if self._stop.is_set():  # stopped while loading: do not open devices
            session.close(keep_model=True)
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

    def _mic_open(self) -> bool:
        """Whether the model hears the microphone now (always, unless push-to-talk is off)."""
        return not self._settings.push_to_talk or self._push_to_talk_held

    def _loop(self, session: Session, audio: OpenedAudio, recorder: AudioRecorder) -> str:
        samples = round(session.period_s * session.input_rate)
        controls = self.controls
        mic_stage = MicStage()
        trim = RANDOM_WEIGHTS_TRIM_DB if session.weights_synthetic else 0.0
        out_stage = OutputStage(session.output_rate, trim_db=trim)
        silence = np.zeros(samples, dtype=np.float32)
        meter = ResponseMeter(audio.source, audio.sink, session.input_rate, session.output_rate)
        numbers = session.loaded.has_text and session.weights_synthetic
        while not self._stop.is_set():
            raw = audio.source.read_period(samples)
            if raw is None:
                return "input ended"
            mic_stage.gain_db = controls.mic_gain_db
            mic = mic_stage.process(raw)
            heard = mic if self._mic_open() else silence  # what the session hears (it gates too)
            meter.heard(heard)
            response = response_facts(meter.poll(), meter.by)  # an answer that has played by now
            self._in_step = True
            outcome = session.step(mic, response)  # the trace's response_ms is the window's
            self._in_step = False
            view = PeriodView.from_outcome(outcome)
            out_stage.volume_db, out_stage.muted = controls.volume_db, controls.muted
            played = out_stage.process(outcome.pcm)
            view = dataclasses.replace(
                view,
                response_ms=response.get("response_ms"),
                dropouts=_dropouts(audio),
            )
            if view.barge_in:
                audio.interrupt()  # the user spoke over the assistant: drop what still queues
            meter.played(outcome.pcm)  # its sound, whatever the volume
            audio.sink.write(played)
            recorder.add(heard, played)
            if numbers:  # random weights' text is token numbers: the window says no words
                view = dataclasses.replace(view, text="")
            if view.heard.strip() or view.text.strip():
                at = audio_time(view.index, view.budget_ms / 1e3)
                self.transcript.add_period(at, view.heard, view.text)
                if self._file is not None:
                    self._file.changed()
            audio.feed_levels(heard, played)
            self.clips = ClipCounts(mic_stage.clipped, out_stage.limiter.limited_blocks)
            self.feed.push(view)
        return "stopped"

    def _info(self, session: Session, audio: OpenedAudio) -> SessionInfo:
        return SessionInfo(
            accelerator=_accelerator(str(session.device)),
            model_name=str(session.model_name),
            device=str(session.device),
            weights_synthetic=bool(session.weights_synthetic),
            output_trim_db=RANDOM_WEIGHTS_TRIM_DB if session.weights_synthetic else 0.0,
            arm=str(session.arm),
            period_s=float(session.period_s),
            input_rate=int(session.input_rate),
            output_rate=int(session.output_rate),
            input_label=audio.input_label,
            output_label=audio.output_label,
            trace=self._trace,
            switchable_arms=tuple(str(arm) for arm in session.switchable_arms),
            replays=session.replay is not None,
            has_text=bool(session.loaded.has_text),
            says_words=bool(session.loaded.has_text) and not session.weights_synthetic,
            stages=tuple(session.stages),
            reused_s=self._reused_s,
        )

"""What the window shows of a conversation: its state, its load, its facts, its periods.

:class:`SessionDisplay` takes the controller's reports (state, progress, ready, failed, ended)
and the 20 Hz tick, and draws them into the window's parts: the toolbar, the cards, the charts
(only those that apply to the model), the transcript and the status line. The window owns the
commands; this module only shows.
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QProgressBar

from adapters.registry import family
from app.gui.live.panel import LivePanel
from app.gui.window.banners import (
    CascadeNote,
    ErrorStrip,
    SyntheticBanner,
    model_line,
    random_weights,
)
from app.gui.window.cards import ConversationCard, SessionCard
from app.gui.window.geometry import WindowStore
from app.gui.window.load_progress import LoadProgress
from app.gui.window.toolbar import MainToolBar
from app.gui.window.transcript_view import TranscriptView
from app.gui.words import CPU_NOTE, NO_ARMS
from app.gui.worker.controller import EngineController, EngineState
from app.gui.worker.routes import AudioRoute
from app.gui.worker.worker import SessionInfo
from app.settings import Settings
from app.transcript import audio_time, transcript_path
from engine.arms import Arm


class MainWindow(Protocol):
    """The window's parts this module draws into (``app.gui.window.main_window``)."""

    toolbar: MainToolBar
    start_action: QAction
    stop_action: QAction
    device_action: QAction
    export_action: QAction
    banner: SyntheticBanner
    cascade_note: CascadeNote
    error_strip: ErrorStrip
    conversation: ConversationCard
    session_card: SessionCard
    transcript: TranscriptView
    panel: LivePanel
    status_text: QLabel
    progress: QProgressBar
    controller: EngineController
    store: WindowStore
    settings: Settings
    route: AudioRoute
    push_to_talk: bool


__all__ = ["PLAYING_DBFS", "MainWindow", "SessionDisplay", "load_key"]

PLAYING_DBFS = -50.0  # the assistant meter above this: its voice is still playing


def load_key(window: MainWindow) -> str:
    """The key under which a model's load time is remembered (its family, size and device, as
    set: resolving ``auto`` would import torch on the GUI thread)."""
    s = window.settings
    return f"{s.family}-{s.model_size}-{s.device}"


class SessionDisplay:
    """Draws the controller's reports into ``window``'s parts (GUI thread)."""

    def __init__(self, window: MainWindow) -> None:
        self.w = window
        self.load = LoadProgress(window.progress, window.status_text)
        self.clear_charts = False  # the next period drawn starts a new session's charts
        self.last_phase = "idle"  # the model's phase in the last period drawn
        self.arms_apply = True  # whether the running session has arms to switch (basic: none)

    # -- controller reports --------------------------------------------------------------

    def starting(self) -> None:
        """Start was pressed: the meters rest, the load's progress begins."""
        w = self.w
        w.error_strip.hide()
        # The charts keep the last session until this one's first period: clearing them now
        # would repaint every chart while the engine thread builds the model, and both are
        # Python that takes turns on the interpreter lock (a 50 ms stall, measured).
        self.clear_charts = True
        card = w.conversation
        for part in (card.mic_meter, card.out_meter, card.mic_clip, card.out_limit):
            part.reset()
        reusing = w.controller.kept is not None
        self.load.begin(None if reusing else w.store.load_seconds(load_key(w)))

    def on_state(self, state: str) -> None:
        w = self.w
        w.toolbar.show_running(state)
        running = state in (EngineState.LOADING.value, EngineState.RUNNING.value)
        w.start_action.setText("&Stop conversation" if running else "&Start conversation")
        w.start_action.setEnabled(state != EngineState.STOPPING.value)
        w.stop_action.setEnabled(running)
        if state != EngineState.RUNNING.value:
            w.conversation.indicator.set_state(state)

    def on_progress(self, stage: str, fraction: float) -> None:
        self.load.report(stage, fraction)

    def on_ready(self, info: SessionInfo) -> None:
        w = self.w
        loaded_s = self.load.end()
        if info.reused_s is None:
            w.store.save_load_seconds(load_key(w), loaded_s)
        w.export_action.setEnabled(True)
        w.conversation.indicator.set_state("running")
        w.banner.setVisible(info.weights_synthetic)
        w.toolbar.offer_arms(tuple(Arm(a) for a in info.switchable_arms))
        card = w.session_card
        card.set("model", info.model_name)
        self.arms_apply = bool(info.switchable_arms)
        card.set("arm", self.arm_text(info.arm))
        cpu = info.accelerator == "CPU"
        card.set("device", "CPU (no graphs launched)" if cpu else info.accelerator,
                 CPU_NOTE if cpu else info.device)  # fmt: skip
        w.panel.set_device(info.accelerator)
        w.panel.show_for(replays=info.replays, timed=bool(info.stages))
        card.set("input", info.input_label)
        trim = f"  ({info.output_trim_db:+.0f} dB: random weights)" if info.output_trim_db else ""
        card.set("output", info.output_label + trim)
        card.set("trace", info.trace.name if info.trace else "none", str(info.trace or ""))
        w.transcript.saved_to(transcript_path(info.trace) if info.trace else None)
        w.transcript.show_model(info.has_text, info.says_words)
        talk = "Conversation running: talk"
        if info.reused_s is not None:
            talk = f"Conversation running (the model stayed loaded: {info.reused_s:.0f} s saved)"
            talk += ": talk"
        w.status_text.setText(f"{talk}, or switch the arm to compare." if self.arms_apply
                              else f"{talk}.")  # fmt: skip

    def on_failed(self, message: str) -> None:
        self.load.end()
        self.w.error_strip.show_error(f"The conversation stopped: {message}")

    def on_ended(self, reason: str) -> None:
        w = self.w
        self.drain()
        self.load.end()
        periods = len(w.panel.history)
        if reason != "failed":
            w.status_text.setText(f"Conversation ended ({reason}) after {periods} periods.")
        else:
            w.status_text.setText("Conversation failed; see the message above.")
        self.show_idle(keep_session=True)

    def show_idle(self, keep_session: bool = False) -> None:
        w, s = self.w, self.w.settings
        w.banner.setVisible(random_weights(s))
        w.cascade_note.show_for(s, speakers=w.route.output == "device")
        arms = "arm" in family(s.family).reads
        w.toolbar.offer_arms(tuple(Arm) if arms else ())  # the next session's, if any apply
        w.toolbar.show_arm(s.arm)
        w.toolbar.talk_action.setVisible(s.push_to_talk)
        w.push_to_talk = s.push_to_talk
        w.conversation.indicator.set_state("idle")
        w.stop_action.setEnabled(False)
        w.device_action.setEnabled(w.route.input_wav is not None)
        w.export_action.setEnabled(w.controller.trace is not None)  # nothing before a session
        if keep_session:
            return
        card = w.session_card
        card.set("model", model_line(s))
        card.set("arm", str(s.arm) if arms else NO_ARMS)
        card.set("device", s.device)
        wav = w.route.input_wav
        card.set("input", wav.name if wav else s.input_device or "system default")
        out = "recorded only" if w.route.output == "none" else s.output_device
        card.set("output", out or "system default")
        if not w.status_text.text():
            w.status_text.setText("Ready: press Start (F5) to converse.")

    def arm_text(self, arm: str) -> str:
        """The session's arm, or that none applies (a model that replays nothing)."""
        return arm if self.arms_apply else NO_ARMS

    # -- the 20 Hz tick ------------------------------------------------------------------

    def drain(self) -> None:
        w = self.w
        views = w.controller.feed.drain()
        if not views:
            return
        if self.clear_charts:
            self.clear_charts = False
            w.panel.clear()
            w.transcript.clear()
        w.panel.add(views)
        for view in views:
            at = audio_time(view.index, view.budget_ms / 1e3)
            w.transcript.add_period(at, view.heard, view.text)
        last = views[-1]
        self.last_phase = last.phase
        w.conversation.indicator.set_state(last.phase, last.voice_prob)
        w.session_card.set("arm", self.arm_text(last.arm))
        w.session_card.set("periods", str(len(w.panel.history)))

    def tick(self) -> None:
        w = self.w
        if w.controller.state is EngineState.LOADING:
            self.load.tick()
        self.drain()
        mic_db, out_db = w.controller.levels_db()
        card = w.conversation
        card.mic_meter.set_level(mic_db)
        card.out_meter.set_level(out_db)
        clips = w.controller.clip_counts()
        card.mic_clip.show_count(clips.mic_clipped)
        card.out_limit.show_count(clips.output_limited)
        # The lamp follows what the user hears: "Listening" only once the voice has played out.
        playing = out_db > PLAYING_DBFS
        shown = card.indicator.state
        if shown == "listen" and playing:
            card.indicator.set_state("speak")
        elif shown == "speak" and not playing and self.last_phase == "listen":
            card.indicator.set_state("listen")

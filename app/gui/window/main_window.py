"""The main window: conversation controls, state and meters, session facts, the live panel.

The GUI thread only draws: a 20 Hz timer drains the engine's period views into the live panel,
moves the meters and the state lamp, and shows the event-loop latency the probe measures. Every
long task runs elsewhere — the session build and the conversation on the engine thread, settings
validation and exports on pool threads — so the window never freezes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QSettings, QSize, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeyEvent, QKeySequence, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFrame,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.gui.collector import GuiThreadCollector
from app.gui.export.dialog import ExportDialog
from app.gui.export.flow import ExportFlow
from app.gui.live.panel import LivePanel
from app.gui.probe import LatencyProbe
from app.gui.settings.dialog import SettingsDialog
from app.gui.window.banners import (
    CascadeNote,
    ErrorStrip,
    SyntheticBanner,
    model_line,
    random_weights,
)
from app.gui.window.cards import ConversationCard, SessionCard, TranscriptCard
from app.gui.window.help import HelpDialog
from app.gui.window.toolbar import MainToolBar
from app.gui.words import ABOUT_HTML, CPU_NOTE, NO_ARMS
from app.gui.worker.controller import EngineController, EngineState
from app.gui.worker.routes import AudioRoute
from app.gui.worker.worker import SessionInfo
from app.settings import (
    Settings,
    SettingsError,
    fall_back,
    load_settings,
    save_settings,
    settings_path,
)
from app.transcript import audio_time
from engine.arms import Arm

__all__ = ["MainWindow"]

_STAGE_TEXT = {"loading": "Loading weights", "capture": "Warming up and capturing graphs"}
_LIVE_FIELDS = ("arm",)  # what changes without a restart (the rest at the next Start)
NARROW_PX = 1000  # content narrower than this puts the charts under the cards
PLAYING_DBFS = -50.0  # the assistant meter above this: its voice is still playing
CHARTS_MIN_H = 720  # the five charts' least height when stacked (the page scrolls instead)


class MainWindow(QMainWindow):
    """Args: ``settings_file`` (default: the platform config file; geometry goes beside it in
    ``window.ini``), ``route`` (devices, or a WAV file as the microphone), ``sessions_dir``
    (where session traces go), ``export_dir`` (the export dialog's first folder)."""

    def __init__(
        self,
        *,
        settings_file: Path | None = None,
        route: AudioRoute | None = None,
        sessions_dir: Path | None = None,
        export_dir: Path | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle("DuplexCadence")
        self.settings_file = settings_file or settings_path()
        self.route = route or AudioRoute()
        self.controller = EngineController(sessions_dir, parent=self)
        self.probe = LatencyProbe(parent=self)
        self.collector = GuiThreadCollector(parent=self)
        self.exports = ExportFlow(self.controller, export_dir, parent=self)
        self.settings_dialog: SettingsDialog | None = None
        self.help_dialog: HelpDialog | None = None
        self._clear_charts = False
        self._last_phase = "idle"  # the model's phase in the last period drawn
        self._arms_apply = True  # whether the running session has arms to switch (basic: none)
        self._push_to_talk = False  # the running (or next) session's mode; Space holds the mic
        self._build()
        self.settings = self._load_settings()
        self._connect()
        self._show_idle()
        self._flag_missing_checkpoint()
        self._restore_geometry()
        self._restore_audio_controls()
        self._timer = QTimer(self)
        self._timer.setInterval(50)  # 20 Hz: DESIGN.md asks 10-30 Hz
        self._timer.timeout.connect(self._tick)
        self._timer.start()
        self._ticks = 0
        self.probe.start()
        app = QApplication.instance()
        if app is not None:
            app.installEventFilter(self)

    # -- construction ------------------------------------------------------------------------

    def _build_actions(self) -> None:
        """The window's commands: shortcuts live here (window-wide), menus and buttons share."""

        def action(text: str, keys: str | None, tip: str, slot: Callable[[], object]) -> QAction:
            act = QAction(text, self)
            if keys:
                act.setShortcut(QKeySequence(keys))
                act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            act.setToolTip(f"{tip} ({keys})" if keys else tip)
            act.setStatusTip(tip)
            act.triggered.connect(slot)
            self.addAction(act)  # shortcuts work even while the menu bar is hidden
            return act

        self.start_action = action(
            "&Start conversation", "F5", "Start or stop the conversation", self.toggle_conversation
        )
        self.stop_action = action(
            "S&top conversation", "Esc", "Stop after the period in flight", self.stop_conversation
        )
        self.wav_action = action(
            "Use a &WAV file as the microphone…", None,
            "Play a recording to the model instead of the microphone (from the next Start)",
            self.choose_input_wav,
        )  # fmt: skip
        self.device_action = action(
            "Use the &microphone device", None,
            "Hear the microphone chosen in Settings again (from the next Start)",
            lambda: self.use_input_wav(None),
        )  # fmt: skip
        self.settings_action = action(
            "S&ettings…", "Ctrl+,", "Model, engine and audio settings", self.open_settings
        )
        self.export_action = action(
            "&Export…", "Ctrl+E", "Export the session's trace, audio and transcript",
            self.open_export,
        )  # fmt: skip
        self.quit_action = action("&Quit", "Ctrl+Q", "Stop and close the window", self.close)
        self.help_action = action(
            "DuplexCadence &Help", "F1", "What the window shows, in plain words", self.open_help
        )
        self.about_action = action("&About DuplexCadence", None, "Version and credits", self.about)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        for act in (self.start_action, self.stop_action, None, self.wav_action,
                    self.device_action, None, self.export_action, self.settings_action, None,
                    self.quit_action):  # fmt: skip
            if act is None:
                file.addSeparator()
            else:
                file.addAction(act)
        self.view_menu = bar.addMenu("&View")
        self.transcript_action = self.view_menu.addAction("&Transcript")
        self.transcript_action.setCheckable(True)
        self.transcript_action.setChecked(True)
        self.transcript_action.setToolTip("Show or hide the transcript of the conversation")
        self.transcript_action.toggled.connect(lambda on: self.transcript.setVisible(on))
        self.reset_layout_action = self.view_menu.addAction("&Reset the layout")
        self.reset_layout_action.triggered.connect(self.reset_layout)
        help_menu = bar.addMenu("&Help")
        help_menu.addAction(self.help_action)
        help_menu.addAction(self.about_action)
        for menu in (file, self.view_menu, help_menu):
            menu.setToolTipsVisible(True)

    def _build(self) -> None:
        self._build_actions()
        self._build_menus()
        self.toolbar = MainToolBar(self.settings_action, self.export_action, self)
        self.addToolBar(self.toolbar)
        self.banner = SyntheticBanner()
        self.cascade_note = CascadeNote()
        self.error_strip = ErrorStrip()
        self.conversation = ConversationCard()
        self.session_card = SessionCard()
        self.transcript = TranscriptCard()
        self.panel = LivePanel()
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(8)
        column.addWidget(self.conversation)
        column.addWidget(self.panel.summary)
        column.addWidget(self.session_card)
        column.addWidget(self.transcript, 1)
        left.setMinimumWidth(290)
        self.left_column = left
        # Wide: the cards scroll on their own and the charts keep the window's height.
        self.left_scroll = QScrollArea()
        self.left_scroll.setWidgetResizable(True)
        self.left_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.left_scroll.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.left_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.left_scroll.setWidget(left)
        self.left_scroll.setMinimumWidth(300)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.left_scroll)
        self.splitter.addWidget(self.panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([360, 1000])
        central = self.content = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.setSpacing(8)
        layout.addWidget(self.banner)
        layout.addWidget(self.cascade_note)
        layout.addWidget(self.error_strip)
        layout.addWidget(self.splitter, 1)
        # Below the content's minimum the window scrolls instead of cutting or squashing it.
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # it scrolls to the focus itself
        self.scroll_area.setWidget(central)
        self.setCentralWidget(self.scroll_area)
        self._build_status_bar()

    def _build_status_bar(self) -> None:
        """Load progress, the status line, and the event-loop latency on the right."""
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setFixedWidth(220)
        self.progress.hide()
        self.status_text = QLabel()
        self.latency = QLabel()
        self.latency.setObjectName("hint")
        self.latency.setToolTip(
            "How late the window reacts to input (the worst in the last half second). The "
            "assistant's response time is the summary's Response figure."
        )
        bar = self.statusBar()
        bar.addWidget(self.progress)
        bar.addWidget(self.status_text, 1)
        bar.addPermanentWidget(self.latency)

    def _connect(self) -> None:
        tb, c = self.toolbar, self.controller
        tb.start_button.clicked.connect(self.start_action.trigger)
        tb.arm_chosen.connect(self.switch_arm)
        self.exports.started.connect(
            lambda folder: self.status_text.setText(f"Exporting to {folder}…")
        )
        self.exports.done.connect(self._export_done)
        self.exports.failed.connect(self.error_strip.show_error)
        tb.talk.connect(c.set_push_to_talk)
        card = self.conversation
        card.mic_gain.valueChanged.connect(lambda v: setattr(c.controls, "mic_gain_db", float(v)))
        card.volume.valueChanged.connect(lambda v: setattr(c.controls, "volume_db", float(v)))
        card.mute.toggled.connect(lambda on: setattr(c.controls, "muted", on))
        self.banner.open_settings.connect(self.open_settings)
        c.state_changed.connect(self._on_state)
        c.progress.connect(self._on_progress)
        c.ready.connect(self._on_ready)
        c.failed.connect(self._on_failed)
        c.ended.connect(self._on_ended)

    def _load_settings(self) -> Settings:
        try:
            settings = load_settings(self.settings_file)
        except SettingsError as exc:
            self.error_strip.show_error(f"{exc} — using the defaults until you save Settings.")
            settings = Settings()
        settings, line = fall_back(settings)  # the basic voice's packages may be missing
        if line is not None:
            self.error_strip.show_error(line)
        return settings

    def _flag_missing_checkpoint(self) -> None:
        """Say at launch, not at Start, that the configured checkpoint folder has gone."""
        folder = self.settings.checkpoint
        if folder is not None and not folder.is_dir():
            self.error_strip.show_error(
                f"The checkpoint folder {folder} no longer exists: choose it again in Settings "
                "(Model > Checkpoint folder), or clear it to run with random weights."
            )

    def _qsettings(self) -> QSettings:
        return QSettings(
            str(self.settings_file.with_name("window.ini")), QSettings.Format.IniFormat
        )

    def _restore_audio_controls(self) -> None:
        """Volume, mute and microphone gain as the user left them (window.ini)."""
        store, card = self._qsettings(), self.conversation
        card.volume.setValue(int(str(store.value("volume_db", 0))))
        card.mic_gain.setValue(int(str(store.value("mic_gain_db", 0))))
        card.mute.setChecked(str(store.value("muted", "false")).lower() == "true")

    def _restore_geometry(self) -> None:
        store = self._qsettings()
        geometry, splitter = store.value("geometry"), store.value("splitter")
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(self._default_size())
        if splitter is not None:
            self.splitter.restoreState(splitter)
        self.fit_screen()
        self._reflow()

    def fit_screen(self) -> None:
        """Keep the window inside the screen's free area (a size saved on a larger screen, or
        at a smaller scaling, would otherwise open partly off screen)."""
        screen = self.screen() or QApplication.primaryScreen()
        if screen is None:
            return
        free = screen.availableGeometry()
        frame = self.frameGeometry().size() - self.size()  # the title bar and borders
        self.resize(self.size().boundedTo(free.size() - frame))
        if not free.contains(self.frameGeometry()):
            self.move(free.topLeft())

    def _reflow(self) -> None:
        """Wide: the cards beside the charts. Narrow: the cards above the charts, and the page
        scrolls, so no chart is ever cut or squashed below a readable height."""
        narrow = self.width() < NARROW_PX  # the window's own width: its layout may lag
        orientation = Qt.Orientation.Vertical if narrow else Qt.Orientation.Horizontal
        if self.splitter.orientation() != orientation:
            self.splitter.setOrientation(orientation)
            if narrow:
                self.splitter.setSizes([self.left_column.sizeHint().height(), CHARTS_MIN_H])
            else:
                self.splitter.setSizes([360, 1000])
        cards = self.left_column.sizeHint().height()
        self.left_scroll.setMinimumHeight(cards if narrow else 0)  # stacked: no inner scroll
        self.content.setMinimumHeight(cards + CHARTS_MIN_H + 40 if narrow else 0)
        self.panel.setMinimumHeight(CHARTS_MIN_H if narrow else 0)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._reflow()

    def _default_size(self) -> QSize:
        """1360x860, or nine tenths of the screen's free area where that is smaller."""
        screen = self.screen() or QApplication.primaryScreen()
        if screen is None:
            return QSize(1360, 860)
        free = screen.availableGeometry()
        return QSize(min(1360, int(free.width() * 0.9)), min(860, int(free.height() * 0.9)))

    def save_geometry(self) -> None:
        store = self._qsettings()
        store.setValue("geometry", self.saveGeometry())
        store.setValue("splitter", self.splitter.saveState())
        card = self.conversation
        store.setValue("volume_db", card.volume.value())
        store.setValue("mic_gain_db", card.mic_gain.value())
        store.setValue("muted", "true" if card.mute.isChecked() else "false")
        store.sync()

    # -- conversation ------------------------------------------------------------------------

    def toggle_conversation(self) -> None:
        if self.controller.state is EngineState.IDLE:
            self.start_conversation()
        else:
            self.stop_conversation()

    def start_conversation(self) -> None:
        self.error_strip.hide()
        # The charts keep the last session until this one's first period: clearing them now
        # would repaint every chart while the engine thread builds the model, and both are
        # Python that takes turns on the interpreter lock (a 50 ms stall, measured).
        self._clear_charts = True
        self.conversation.mic_meter.reset()
        self.conversation.out_meter.reset()
        self.conversation.mic_clip.reset()
        self.conversation.out_limit.reset()
        self.progress.setValue(0)
        self.progress.show()
        self.status_text.setText("Loading the model…")
        self._push_to_talk = self.settings.push_to_talk
        self.controller.start(dataclasses.replace(self.settings), self.route)

    def stop_conversation(self) -> None:
        self.controller.stop()
        self.status_text.setText("Stopping after the period in flight…")

    def switch_arm(self, arm: Arm) -> None:
        """Use ``arm`` from the next period on (and remember it); the charts mark the switch."""
        if arm == self.settings.arm:
            return
        self._apply_settings(dataclasses.replace(self.settings, arm=arm))

    def _on_state(self, state: str) -> None:
        self.toolbar.show_running(state)
        running = state in (EngineState.LOADING.value, EngineState.RUNNING.value)
        self.start_action.setText("&Stop conversation" if running else "&Start conversation")
        self.start_action.setEnabled(state != EngineState.STOPPING.value)
        self.stop_action.setEnabled(running)
        if state != EngineState.RUNNING.value:
            self.conversation.indicator.set_state(state)

    def _on_progress(self, stage: str, fraction: float) -> None:
        self.progress.setValue(round(100 * max(0.0, min(1.0, fraction))))
        self.progress.setFormat(f"{_STAGE_TEXT.get(stage, stage)} %p%")
        self.status_text.setText(f"{_STAGE_TEXT.get(stage, stage)}…")

    def _on_ready(self, info: SessionInfo) -> None:
        self.progress.hide()
        self.export_action.setEnabled(True)
        self.conversation.indicator.set_state("running")
        self.banner.setVisible(info.weights_synthetic)
        self.toolbar.offer_arms(tuple(Arm(a) for a in info.switchable_arms))
        card = self.session_card
        card.set("model", info.model_name)
        self._arms_apply = bool(info.switchable_arms)
        card.set("arm", self._arm_text(info.arm))
        cpu = info.accelerator == "CPU"
        card.set("device", "CPU (no graphs launched)" if cpu else info.accelerator,
                 CPU_NOTE if cpu else info.device)  # fmt: skip
        self.panel.set_device(info.accelerator)
        card.set("input", info.input_label)
        trim = f"  ({info.output_trim_db:+.0f} dB: random weights)" if info.output_trim_db else ""
        card.set("output", info.output_label + trim)
        card.set("trace", info.trace.name if info.trace else "none", str(info.trace or ""))
        self.status_text.setText("Conversation running: talk, or switch the arm to compare.")

    def _on_failed(self, message: str) -> None:
        self.progress.hide()
        self.error_strip.show_error(f"The conversation stopped: {message}")

    def _on_ended(self, reason: str) -> None:
        self._drain()
        self.progress.hide()
        periods = len(self.panel.history)
        if reason != "failed":
            self.status_text.setText(f"Conversation ended ({reason}) after {periods} periods.")
        else:
            self.status_text.setText("Conversation failed; see the message above.")
        self._show_idle(keep_session=True)

    def _show_idle(self, keep_session: bool = False) -> None:
        s = self.settings
        self.banner.setVisible(random_weights(s))
        self.cascade_note.show_for(s)
        self.toolbar.offer_arms(tuple(Arm))  # the next session starts with any arm
        self.toolbar.show_arm(s.arm)
        self.toolbar.talk_action.setVisible(s.push_to_talk)
        self._push_to_talk = s.push_to_talk
        self.conversation.indicator.set_state("idle")
        self.stop_action.setEnabled(False)
        self.device_action.setEnabled(self.route.input_wav is not None)
        has_session = self.controller.trace is not None
        self.export_action.setEnabled(has_session)  # nothing to export before a first session
        if keep_session:
            return
        self.session_card.set("model", model_line(s))
        self.session_card.set("arm", str(s.arm))
        self.session_card.set("device", s.device)
        wav = self.route.input_wav
        self.session_card.set("input", wav.name if wav else s.input_device or "system default")
        out = "recorded only" if self.route.output == "none" else s.output_device
        self.session_card.set("output", out or "system default")
        if not self.status_text.text():
            self.status_text.setText("Ready: press Start (F5) to converse.")

    def _arm_text(self, arm: str) -> str:
        """The session's arm, or that none applies (a model that replays nothing)."""
        return arm if self._arms_apply else NO_ARMS

    # -- the 20 Hz tick ----------------------------------------------------------------------

    def _drain(self) -> None:
        views = self.controller.feed.drain()
        if not views:
            return
        if self._clear_charts:
            self._clear_charts = False
            self.panel.clear()
            self.transcript.clear()
        self.panel.add(views)
        for view in views:
            at = audio_time(view.index, view.budget_ms / 1e3)
            self.transcript.add_period(at, view.heard, view.text)
        last = views[-1]
        self._last_phase = last.phase
        self.conversation.indicator.set_state(last.phase, last.voice_prob)
        self.session_card.set("arm", self._arm_text(last.arm))
        self.session_card.set("periods", str(len(self.panel.history)))

    def _tick(self) -> None:
        self._drain()
        mic_db, out_db = self.controller.levels_db()
        self.conversation.mic_meter.set_level(mic_db)
        self.conversation.out_meter.set_level(out_db)
        clips = self.controller.clip_counts()
        self.conversation.mic_clip.show_count(clips.mic_clipped)
        self.conversation.out_limit.show_count(clips.output_limited)
        # The lamp follows what the user hears: "Listening" only once the voice has played out.
        playing = out_db > PLAYING_DBFS
        shown = self.conversation.indicator.state
        if shown == "listen" and playing:
            self.conversation.indicator.set_state("speak")
        elif shown == "speak" and not playing and self._last_phase == "listen":
            self.conversation.indicator.set_state("listen")
        self._ticks += 1
        if self._ticks % 10 == 0:
            self.latency.setText(f"window lag {self.probe.recent_ms(50):.0f} ms")

    # -- settings ----------------------------------------------------------------------------

    def open_settings(self) -> SettingsDialog:
        """Open the (window-modal, non-blocking) settings dialog; returns it."""
        dialog = SettingsDialog(self.settings, self)
        dialog.applied.connect(self._apply_settings)
        dialog.finished.connect(lambda _: setattr(self, "settings_dialog", None))
        self.settings_dialog = dialog
        dialog.open()
        return dialog

    def _apply_settings(self, settings: Settings) -> None:
        old, self.settings = self.settings, settings
        try:
            save_settings(settings, self.settings_file)
        except SettingsError as exc:
            self.error_strip.show_error(str(exc))
        if settings.arm != old.arm:
            self.controller.request_arm(settings.arm)
            self.status_text.setText(f"Arm {settings.arm} from the next period.")
        self.toolbar.show_arm(settings.arm)
        if self.controller.state is EngineState.IDLE:
            self._show_idle()
            return
        restart = [
            f.name
            for f in dataclasses.fields(Settings)
            if f.name not in _LIVE_FIELDS and getattr(old, f.name) != getattr(settings, f.name)
        ]
        if restart:
            self.status_text.setText(
                f"Saved; {', '.join(restart)} apply when the conversation starts again."
            )

    # -- the microphone -------------------------------------------------------------------

    def choose_input_wav(self) -> None:
        """Ask for a sound file to play to the model as its microphone."""
        start = str(self.route.input_wav.parent) if self.route.input_wav else str(Path.home())
        chosen, _ = QFileDialog.getOpenFileName(
            self, "A recording as the microphone", start, "Sound files (*.wav *.flac *.ogg)"
        )
        if chosen:
            self.use_input_wav(Path(chosen))

    def use_input_wav(self, wav: Path | None) -> None:
        """The microphone from the next Start: ``wav`` played in real time, or the device."""
        self.route = dataclasses.replace(self.route, input_wav=wav)
        self.device_action.setEnabled(wav is not None)
        label = wav.name if wav else self.settings.input_device or "system default"
        self.session_card.set("input", label, str(wav or ""))
        when = "now" if self.controller.state is EngineState.IDLE else "from the next Start"
        self.status_text.setText(f"Microphone {when}: {label}.")

    # -- help --------------------------------------------------------------------------------

    def open_help(self) -> HelpDialog:
        if self.help_dialog is None:
            self.help_dialog = HelpDialog(self)
        self.help_dialog.show()
        self.help_dialog.raise_()
        return self.help_dialog

    def about(self) -> None:
        QMessageBox.about(self, "About DuplexCadence", ABOUT_HTML)

    def reset_layout(self) -> None:
        """The default size (bounded by the screen) and column split."""
        self.resize(self._default_size())
        self.splitter.setSizes([360, 1000])

    # -- export ------------------------------------------------------------------------------

    def open_export(self) -> ExportDialog:
        return self.exports.open_dialog(self)

    def _export_done(self, paths: list[str]) -> None:
        folder = Path(paths[0]).parent if paths else self.exports.folder
        self.status_text.setText(f"Exported {len(paths)} files to {folder}.")

    # -- keys and closing --------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Push-to-talk on Space, for keys aimed at any widget of this window.

        A filter on the application, not ``keyPressEvent``: the focused button or combo box
        would otherwise take Space first (and Space on a focused Stop button ends the call).
        Text fields keep their Space; auto-repeats are swallowed.
        """
        kind = event.type()
        if kind not in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease):
            return False
        if not self._push_to_talk or not isinstance(watched, QWidget):
            return False
        if watched.window() is not self or isinstance(watched, QLineEdit):
            return False  # another window's key, or a space typed into a text field
        assert isinstance(event, QKeyEvent), f"a {kind} event is a QKeyEvent"
        if event.key() != Qt.Key.Key_Space:
            return False
        if not event.isAutoRepeat():
            held = kind == QEvent.Type.KeyPress
            self.controller.set_push_to_talk(held)
            self.toolbar.talk_button.setDown(held)
        return True

    def closeEvent(self, event: QCloseEvent) -> None:
        app = QApplication.instance()
        if app is not None:
            app.removeEventFilter(self)
        self.save_geometry()
        self._timer.stop()
        self.probe.stop()
        self.collector.stop()
        if not self.controller.shutdown(timeout_s=30.0):
            self.status_text.setText("The engine is still finishing a period…")
        event.accept()

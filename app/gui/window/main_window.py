"""The main window: conversation controls, state and meters, session facts, the live panel.

The GUI thread only draws: a 20 Hz timer drains the engine's period views into the live panel,
moves the meters and the state lamp, and shows the event-loop latency the probe measures. Every
long task runs elsewhere — the session build and the conversation on the engine thread, settings
validation and exports on pool threads — so the window never freezes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QSettings, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QKeyEvent
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QLineEdit,
    QMainWindow,
    QProgressBar,
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
from app.gui.window.banners import ErrorStrip, SyntheticBanner
from app.gui.window.cards import ConversationCard, SessionCard
from app.gui.window.toolbar import MainToolBar
from app.gui.worker.controller import EngineController, EngineState
from app.gui.worker.routes import AudioRoute
from app.gui.worker.worker import SessionInfo
from app.settings import Settings, SettingsError, load_settings, save_settings, settings_path
from engine.arms import Arm

__all__ = ["MainWindow"]

_STAGE_TEXT = {"loading": "Loading weights", "capture": "Warming up and capturing graphs"}
_LIVE_FIELDS = ("arm",)  # what changes without a restart (the rest at the next Start)


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
        self._clear_charts = False
        self._push_to_talk = False  # the running (or next) session's mode; Space holds the mic
        self._build()
        self.settings = self._load_settings()
        self._connect()
        self._show_idle()
        self._restore_geometry()
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

    def _build(self) -> None:
        self.toolbar = MainToolBar(self)
        self.addToolBar(self.toolbar)
        self.banner = SyntheticBanner()
        self.error_strip = ErrorStrip()
        self.conversation = ConversationCard()
        self.session_card = SessionCard()
        self.panel = LivePanel()
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(8)
        column.addWidget(self.conversation)
        column.addWidget(self.panel.summary)
        column.addWidget(self.session_card)
        column.addStretch(1)
        left.setMinimumWidth(290)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([320, 1000])
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.setSpacing(8)
        layout.addWidget(self.banner)
        layout.addWidget(self.error_strip)
        layout.addWidget(self.splitter, 1)
        self.setCentralWidget(central)
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
        self.latency.setToolTip("GUI event-loop latency (worst over the last half second)")
        bar = self.statusBar()
        bar.addWidget(self.progress)
        bar.addWidget(self.status_text, 1)
        bar.addPermanentWidget(self.latency)

    def _connect(self) -> None:
        tb, c = self.toolbar, self.controller
        tb.start_button.clicked.connect(self.toggle_conversation)
        tb.arm_chosen.connect(self.switch_arm)
        tb.settings_action.triggered.connect(self.open_settings)
        tb.export_action.triggered.connect(self.open_export)
        self.exports.started.connect(
            lambda folder: self.status_text.setText(f"Exporting to {folder}…")
        )
        self.exports.done.connect(self._export_done)
        self.exports.failed.connect(self.error_strip.show_error)
        tb.talk.connect(c.set_push_to_talk)
        self.banner.open_settings.connect(self.open_settings)
        c.state_changed.connect(self._on_state)
        c.progress.connect(self._on_progress)
        c.ready.connect(self._on_ready)
        c.failed.connect(self._on_failed)
        c.ended.connect(self._on_ended)

    def _load_settings(self) -> Settings:
        try:
            return load_settings(self.settings_file)
        except SettingsError as exc:
            self.error_strip.show_error(f"{exc} — using the defaults until you save Settings.")
            return Settings()

    def _qsettings(self) -> QSettings:
        return QSettings(
            str(self.settings_file.with_name("window.ini")), QSettings.Format.IniFormat
        )

    def _restore_geometry(self) -> None:
        store = self._qsettings()
        geometry, splitter = store.value("geometry"), store.value("splitter")
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(1360, 860)
        if splitter is not None:
            self.splitter.restoreState(splitter)

    def save_geometry(self) -> None:
        store = self._qsettings()
        store.setValue("geometry", self.saveGeometry())
        store.setValue("splitter", self.splitter.saveState())
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
        if state != EngineState.RUNNING.value:
            self.conversation.indicator.set_state(state)

    def _on_progress(self, stage: str, fraction: float) -> None:
        self.progress.setValue(round(100 * max(0.0, min(1.0, fraction))))
        self.progress.setFormat(f"{_STAGE_TEXT.get(stage, stage)} %p%")
        self.status_text.setText(f"{_STAGE_TEXT.get(stage, stage)}…")

    def _on_ready(self, info: SessionInfo) -> None:
        self.progress.hide()
        self.conversation.indicator.set_state("running")
        self.banner.setVisible(info.weights_synthetic)
        card = self.session_card
        card.set("model", info.model_name)
        card.set("arm", info.arm)
        card.set("device", info.device)
        card.set("input", info.input_label)
        card.set("output", info.output_label)
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
        self.banner.setVisible(s.checkpoint is None)
        self.toolbar.show_arm(s.arm)
        self.toolbar.talk_action.setVisible(s.push_to_talk)
        self._push_to_talk = s.push_to_talk
        self.conversation.indicator.set_state("idle")
        if keep_session:
            return
        weights = "checkpoint" if s.checkpoint else "seeded random weights"
        self.session_card.set("model", f"{s.family} ({s.model_size}, {weights})")
        self.session_card.set("arm", str(s.arm))
        self.session_card.set("device", s.device)
        wav = self.route.input_wav
        self.session_card.set("input", wav.name if wav else s.input_device or "system default")
        out = "recorded only" if self.route.output == "none" else s.output_device
        self.session_card.set("output", out or "system default")
        if not self.status_text.text():
            self.status_text.setText("Ready: press Start (F5) to converse.")

    # -- the 20 Hz tick ----------------------------------------------------------------------

    def _drain(self) -> None:
        views = self.controller.feed.drain()
        if not views:
            return
        if self._clear_charts:
            self._clear_charts = False
            self.panel.clear()
        self.panel.add(views)
        last = views[-1]
        self.conversation.indicator.set_state(last.phase, last.voice_prob)
        self.session_card.set("arm", last.arm)
        self.session_card.set("periods", str(len(self.panel.history)))

    def _tick(self) -> None:
        self._drain()
        mic_db, out_db = self.controller.levels_db()
        self.conversation.mic_meter.set_level(mic_db)
        self.conversation.out_meter.set_level(out_db)
        self._ticks += 1
        if self._ticks % 10 == 0:
            self.latency.setText(f"UI latency {self.probe.recent_ms(50):.0f} ms")

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

"""The main window: the conversation at the centre, the cards beside it, the charts a tab away.

The GUI thread only draws: a 20 Hz timer drains the engine's period views into the transcript
and the charts, moves the meters and the state lamp, and shows the event-loop latency the probe
measures. Every long task runs elsewhere — the session build and the conversation on the engine
thread, settings validation and exports on pool threads — so the window never freezes.

Its parts, by concern: :mod:`~app.gui.window.layout` (what stands where, narrow and wide),
:mod:`~app.gui.window.menus` (commands, shortcuts, menus), :mod:`~app.gui.window.geometry`
(size, screen, what ``window.ini`` remembers) and :mod:`~app.gui.window.session_view` (what the
conversation shows). This module holds the commands and wires them.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QWidget,
)

from app.gui.collector import GuiThreadCollector
from app.gui.export.dialog import ExportDialog
from app.gui.export.flow import ExportFlow
from app.gui.probe import LatencyProbe
from app.gui.settings.dialog import SettingsDialog
from app.gui.window import geometry
from app.gui.window.help import HelpDialog
from app.gui.window.layout import MainView
from app.gui.window.menus import Slots, WindowActions, build_menus
from app.gui.window.session_view import SessionDisplay
from app.gui.window.toolbar import MainToolBar
from app.gui.words import ABOUT_HTML
from app.gui.worker.controller import EngineController, EngineState
from app.gui.worker.routes import AudioRoute
from app.settings import Settings, SettingsError, fall_back, load_settings, save_settings
from app.settings import settings_path as default_settings_path
from engine.arms import Arm

__all__ = ["MainWindow"]

_LIVE_FIELDS = ("arm",)  # what changes without a restart (the rest at the next Start)


class _Lifeline:
    """Ends the conversation and the app when the window is destroyed without being closed
    (no window, no process). Not the window's child: it outlives the window's C++ object."""

    def __init__(self, controller: EngineController) -> None:
        self.controller = controller
        self.closed = False

    def window_gone(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.controller.blockSignals(True)  # nothing is left to draw what it reports
        self.controller.shutdown(timeout_s=30.0)
        app = QApplication.instance()
        if app is not None:
            app.quit()


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
        self.settings_file = settings_file or default_settings_path()
        self.store = geometry.WindowStore(self.settings_file)
        self.route = route or AudioRoute()
        # No parent: the controller outlives a destroyed window long enough to end the talk.
        self.controller = EngineController(sessions_dir)
        self.lifeline = _Lifeline(self.controller)
        self.destroyed.connect(partial(_Lifeline.window_gone, self.lifeline))
        self.probe = LatencyProbe(parent=self)
        self.collector = GuiThreadCollector(parent=self)
        self.exports = ExportFlow(self.controller, export_dir, parent=self)
        self.settings_dialog: SettingsDialog | None = None
        self.help_dialog: HelpDialog | None = None
        self.push_to_talk = False  # the running (or next) session's mode; Space holds the mic
        self._build()
        self.display = SessionDisplay(self)
        self.settings = self._load_settings()
        self._connect()
        self.display.show_idle()
        self._flag_missing_checkpoint()
        self.store.restore(self, self.view)
        self.store.restore_audio(self.conversation)
        self._timer = QTimer(self)
        self._timer.setInterval(50)  # 20 Hz: docs/architecture.md asks 10-30 Hz
        self._timer.timeout.connect(self._tick)
        self._timer.start()
        self._ticks = 0
        self.probe.start()
        app = QApplication.instance()
        if app is not None:
            app.installEventFilter(self)

    # -- construction ------------------------------------------------------------------------

    def _build(self) -> None:
        self.actions_ = WindowActions(self, Slots(
            toggle=self.toggle_conversation, stop=self.stop_conversation,
            choose_wav=self.choose_input_wav, use_device=lambda: self.use_input_wav(None),
            settings=self.open_settings, export=self.open_export, quit=self.close,
            help=self.open_help, about=self.about, show_conversation=self.show_conversation,
            show_charts=self.show_charts, reset_layout=self.reset_layout,
        ))  # fmt: skip
        a = self.actions_
        self.start_action, self.stop_action, self.wav_action = a.start, a.stop, a.wav
        self.device_action, self.settings_action, self.export_action = (
            a.device,
            a.settings,
            a.export,
        )
        self.quit_action, self.help_action, self.about_action = a.quit, a.help, a.about
        self.view_menu = build_menus(self, a)
        self.toolbar = MainToolBar(self.settings_action, self.export_action, self)
        self.addToolBar(self.toolbar)
        view = self.view = self.scroll_area = MainView()
        self.banner, self.cascade_note, self.error_strip = (
            view.banner,
            view.cascade_note,
            view.error_strip,
        )
        self.conversation, self.session_card = view.conversation, view.session_card
        self.transcript, self.panel, self.splitter = view.transcript, view.panel, view.splitter
        self.setCentralWidget(view)
        self._build_status_bar()

    def _build_status_bar(self) -> None:
        """Load progress, the status line, and the event-loop latency on the right."""
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setFixedWidth(260)
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
        tb, c, d = self.toolbar, self.controller, self.display
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
        c.state_changed.connect(d.on_state)
        c.progress.connect(d.on_progress)
        c.ready.connect(d.on_ready)
        c.failed.connect(d.on_failed)
        c.ended.connect(d.on_ended)

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

    # -- layout ------------------------------------------------------------------------------

    def fit_screen(self) -> None:
        geometry.fit_screen(self)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.view.reflow(self.width())

    def reset_layout(self) -> None:
        """The default size (bounded by the screen) and column split."""
        self.resize(geometry.default_size(self))
        self.view.reset_split()

    def show_conversation(self) -> None:
        self.view.show_conversation()

    def show_charts(self) -> None:
        self.view.show_charts()

    def save_geometry(self) -> None:
        self.store.save(self, self.view)

    # -- conversation ------------------------------------------------------------------------

    def toggle_conversation(self) -> None:
        if self.controller.state is EngineState.IDLE:
            self.start_conversation()
        else:
            self.stop_conversation()

    def start_conversation(self) -> None:
        self.display.starting()
        self.push_to_talk = self.settings.push_to_talk
        self.controller.start(dataclasses.replace(self.settings), self.route)

    def stop_conversation(self) -> None:
        self.controller.stop()
        self.status_text.setText("Stopping after the period in flight…")

    def switch_arm(self, arm: Arm) -> None:
        """Use ``arm`` from the next period on (and remember it); the charts mark the switch."""
        if arm == self.settings.arm:
            return
        self._apply_settings(dataclasses.replace(self.settings, arm=arm))

    @property
    def _last_phase(self) -> str:
        return self.display.last_phase

    @_last_phase.setter
    def _last_phase(self, phase: str) -> None:
        self.display.last_phase = phase

    def _tick(self) -> None:
        self.display.tick()
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
            self.display.show_idle()
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

    # -- help and export ---------------------------------------------------------------------

    def open_help(self) -> HelpDialog:
        if self.help_dialog is None:
            self.help_dialog = HelpDialog(self)
        self.help_dialog.show()
        self.help_dialog.raise_()
        return self.help_dialog

    def about(self) -> None:
        QMessageBox.about(self, "About DuplexCadence", ABOUT_HTML)

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
        if not self.push_to_talk or not isinstance(watched, QWidget):
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
        self.lifeline.closed = True  # a close request: the app quits on its own
        if not self.controller.shutdown(timeout_s=30.0):
            self.status_text.setText("The engine is still finishing a period…")
        event.accept()

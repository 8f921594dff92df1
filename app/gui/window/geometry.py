"""Where the window stands and what it remembers beside the settings (``window.ini``): its
geometry, the column split, volume, mute and microphone gain; and keeping it on the screen."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QSize
from PySide6.QtWidgets import QApplication, QMainWindow

from app.gui.window.cards import ConversationCard
from app.gui.window.layout import MainView

__all__ = ["WindowStore", "default_size", "fit_screen"]


def default_size(window: QMainWindow) -> QSize:
    """1360x860, or nine tenths of the screen's free area where that is smaller."""
    screen = window.screen() or QApplication.primaryScreen()
    if screen is None:
        return QSize(1360, 860)
    free = screen.availableGeometry()
    return QSize(min(1360, int(free.width() * 0.9)), min(860, int(free.height() * 0.9)))


def fit_screen(window: QMainWindow) -> None:
    """Keep ``window`` inside the screen's free area (a size saved on a larger screen, or at a
    smaller scaling, would otherwise open partly off screen)."""
    screen = window.screen() or QApplication.primaryScreen()
    if screen is None:
        return
    free = screen.availableGeometry()
    frame = window.frameGeometry().size() - window.size()  # the title bar and borders
    window.resize(window.size().boundedTo(free.size() - frame))
    if not free.contains(window.frameGeometry()):
        window.move(free.topLeft())


class WindowStore:
    """``window.ini`` beside ``settings_file``."""

    def __init__(self, settings_file: Path) -> None:
        self.path = settings_file.with_name("window.ini")

    def _open(self) -> QSettings:
        return QSettings(str(self.path), QSettings.Format.IniFormat)

    def restore(self, window: QMainWindow, view: MainView) -> None:
        """The saved geometry (bounded by the screen) and split, or the defaults."""
        store = self._open()
        geometry, splitter = store.value("geometry"), store.value("splitter")
        if geometry is None or not window.restoreGeometry(geometry):
            window.resize(default_size(window))
        if splitter is not None:
            view.splitter.restoreState(splitter)
        fit_screen(window)
        view.reflow(window.width())

    def restore_audio(self, card: ConversationCard) -> None:
        """Volume, mute and microphone gain as the user left them."""
        store = self._open()
        card.volume.setValue(int(str(store.value("volume_db", 0))))
        card.mic_gain.setValue(int(str(store.value("mic_gain_db", 0))))
        card.mute.setChecked(str(store.value("muted", "false")).lower() == "true")

    def save(self, window: QMainWindow, view: MainView) -> None:
        store = self._open()
        store.setValue("geometry", window.saveGeometry())
        store.setValue("splitter", view.splitter.saveState())
        card = view.conversation
        store.setValue("volume_db", card.volume.value())
        store.setValue("mic_gain_db", card.mic_gain.value())
        store.setValue("muted", "true" if card.mute.isChecked() else "false")
        store.sync()

    def load_seconds(self, key: str) -> float | None:
        """How long the last load of model ``key`` took (None: never loaded here)."""
        value = self._open().value(f"load_s/{key}")
        try:
            return float(str(value)) if value is not None else None
        except ValueError:
            return None

    def save_load_seconds(self, key: str, seconds: float) -> None:
        store = self._open()
        store.setValue(f"load_s/{key}", round(seconds, 1))
        store.sync()

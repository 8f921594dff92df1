"""The window's commands and menus: one QAction per command, shared by the menus, the toolbar
and the keyboard (shortcuts live on the window, so they work while the menu bar is hidden)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

__all__ = ["Slots", "WindowActions", "build_menus"]

Slot = Callable[[], object]


@dataclass(frozen=True)
class Slots:
    """What each command does (the window's methods)."""

    toggle: Slot
    stop: Slot
    choose_wav: Slot
    use_device: Slot
    settings: Slot
    export: Slot
    quit: Slot
    help: Slot
    about: Slot
    show_conversation: Slot
    show_charts: Slot
    reset_layout: Slot


class WindowActions:
    """The commands, each a QAction added to ``window`` (its shortcut window-wide)."""

    def __init__(self, window: QMainWindow, slots: Slots) -> None:
        self._window = window

        def action(text: str, keys: str | None, tip: str, slot: Slot) -> QAction:
            act = QAction(text, window)
            if keys:
                act.setShortcut(QKeySequence(keys))
                act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            act.setToolTip(f"{tip} ({keys})" if keys else tip)
            act.setStatusTip(tip)
            act.triggered.connect(slot)
            window.addAction(act)  # shortcuts work even while the menu bar is hidden
            return act

        self.start = action(
            "&Start conversation", "F5", "Start or stop the conversation", slots.toggle
        )
        self.stop = action(
            "S&top conversation", "Esc", "Stop after the period in flight", slots.stop
        )
        self.wav = action(
            "Use a &WAV file as the microphone…", None,
            "Play a recording to the model instead of the microphone (from the next Start)",
            slots.choose_wav,
        )  # fmt: skip
        self.device = action(
            "Use the &microphone device", None,
            "Hear the microphone chosen in Settings again (from the next Start)",
            slots.use_device,
        )  # fmt: skip
        self.settings = action(
            "S&ettings…", "Ctrl+,", "Model, engine and audio settings", slots.settings
        )
        self.export = action(
            "&Export…", "Ctrl+E", "Export the session's trace, audio and transcript", slots.export
        )
        self.quit = action("&Quit", "Ctrl+Q", "Stop and close the window", slots.quit)
        self.help = action(
            "DuplexCadence &Help", "F1", "What the window shows, in plain words", slots.help
        )
        self.about = action("&About DuplexCadence", None, "Version and credits", slots.about)
        self.conversation = action(
            "The &conversation", "Ctrl+1", "Show the transcript of the conversation",
            slots.show_conversation,
        )  # fmt: skip
        self.charts = action(
            "The engine's c&harts", "Ctrl+2", "Show the engine's charts", slots.show_charts
        )
        self.reset_layout = action(
            "&Reset the layout", None, "The default size and column widths", slots.reset_layout
        )


def build_menus(window: QMainWindow, actions: WindowActions) -> QMenu:
    """File, View and Help; returns the View menu."""
    bar = window.menuBar()
    file = bar.addMenu("&File")
    a = actions
    for act in (a.start, a.stop, None, a.wav, a.device, None, a.export, a.settings, None,
                a.quit):  # fmt: skip
        if act is None:
            file.addSeparator()
        else:
            file.addAction(act)
    view = bar.addMenu("&View")
    for act in (a.conversation, a.charts, None, a.reset_layout):
        if act is None:
            view.addSeparator()
        else:
            view.addAction(act)
    help_menu = bar.addMenu("&Help")
    help_menu.addAction(a.help)
    help_menu.addAction(a.about)
    for menu in (file, view, help_menu):
        menu.setToolTipsVisible(True)
    return view

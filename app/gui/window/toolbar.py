"""The window's toolbar: Start/Stop, the live arm switch, Settings, Export, push-to-talk."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QSizePolicy, QToolBar, QWidget

from engine.arms import Arm

__all__ = ["MainToolBar"]


class MainToolBar(QToolBar):
    """Controls only; the window connects them. ``arm_chosen`` fires on a user's pick only."""

    arm_chosen = Signal(object)  # Arm
    talk = Signal(bool)  # push-to-talk held / released

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Conversation", parent)
        self.setMovable(False)
        self.setIconSize(QSize(16, 16))
        self.start_button = QPushButton("▶  Start")
        self.start_button.setObjectName("start")
        self.start_button.setToolTip("Start or stop the conversation (F5)")
        self.start_button.setShortcut(QKeySequence(Qt.Key.Key_F5))
        self.start_button.setMinimumWidth(110)
        self.addWidget(self.start_button)
        self.addSeparator()
        self.addWidget(QLabel(" Arm "))
        self.arm = QComboBox()
        for arm in Arm:  # Qt keeps a StrEnum as a plain str: store values, read with Arm()
            self.arm.addItem(arm.value, arm.value)
        self.arm.setToolTip(
            "Ablation arm: switches at the next period, without a restart; marked on the charts"
        )
        self.arm.activated.connect(lambda i: self.arm_chosen.emit(Arm(self.arm.itemData(i))))
        self.addWidget(self.arm)
        self.addSeparator()
        self.settings_action = QAction("Settings…", self)
        self.settings_action.setShortcut(QKeySequence("Ctrl+,"))
        self.addAction(self.settings_action)
        self.export_action = QAction("Export…", self)
        self.export_action.setShortcut(QKeySequence("Ctrl+E"))
        self.export_action.setToolTip("Export the session trace and audio (Ctrl+E)")
        self.addAction(self.export_action)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.addWidget(spacer)
        self.talk_button = QPushButton("🎤  Hold to talk")
        self.talk_button.setToolTip(
            "Push-to-talk: the model hears you while this (or Space) is held"
        )
        self.talk_button.pressed.connect(lambda: self.talk.emit(True))
        self.talk_button.released.connect(lambda: self.talk.emit(False))
        self.talk_action = self.addWidget(self.talk_button)
        self.talk_action.setVisible(False)

    def show_arm(self, arm: Arm) -> None:
        """Show ``arm`` without emitting ``arm_chosen``."""
        index = self.arm.findData(Arm(arm).value)
        if index >= 0 and index != self.arm.currentIndex():
            self.arm.setCurrentIndex(index)

    def show_running(self, state: str) -> None:
        """Button text and colour for the controller state (idle, loading, running, stopping)."""
        running = state in ("loading", "running")
        self.start_button.setText("■  Stop" if running else "▶  Start")
        self.start_button.setEnabled(state != "stopping")
        self.start_button.setProperty("running", "true" if running else "false")
        style = self.start_button.style()
        style.unpolish(self.start_button)
        style.polish(self.start_button)

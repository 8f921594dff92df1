"""The window's toolbar: Start/Stop, the live arm switch, Settings, Export, push-to-talk.

Every control is reachable with Tab and named for assistive technology. The keyboard shortcuts
live on the window's actions (F5, Esc, Ctrl+,, Ctrl+E), not on these buttons: a button's
shortcut is cleared whenever its text changes, and Start becomes Stop.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QSizePolicy, QToolBar, QWidget

from app.gui.a11y import explain
from app.gui.words import ARM_WORDS, NO_ARMS
from engine.arms import Arm

__all__ = ["MainToolBar"]


class MainToolBar(QToolBar):
    """Controls only; the window connects them. ``arm_chosen`` fires on a user's pick only.

    ``settings_action`` and ``export_action`` are the window's (its menus share them)."""

    arm_chosen = Signal(object)  # Arm
    talk = Signal(bool)  # push-to-talk held / released

    def __init__(
        self, settings_action: QAction, export_action: QAction, parent: QWidget | None = None
    ) -> None:
        super().__init__("Conversation", parent)
        self.setMovable(False)
        self.setIconSize(QSize(16, 16))
        self.start_button = explain(
            QPushButton("▶  Start"), "start or stop",
            "Start the conversation: load the model and listen (F5 starts and stops, Esc stops).",
        )  # fmt: skip
        self.start_button.setObjectName("start")
        self.start_button.setMinimumWidth(110)
        self.addWidget(self.start_button)
        self.addSeparator()
        arm_label = QLabel(" Arm ")
        self.addWidget(arm_label)
        self.arm = QComboBox()
        self.offer_arms(tuple(Arm))
        # The box shows the start of the words; the open list shows them whole.
        self.arm.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.arm.setMinimumContentsLength(22)
        self.arm.view().setMinimumWidth(self.arm.view().sizeHintForColumn(0) + 24)
        explain(
            self.arm, "arm",
            "How the engine runs the model (the paper's ablation arm). It switches at the next "
            "period without a restart, and every chart marks the switch. Press F1 for more.",
        )  # fmt: skip
        arm_label.setBuddy(self.arm)
        self.arm.activated.connect(lambda i: self.arm_chosen.emit(Arm(self.arm.itemData(i))))
        self.addWidget(self.arm)
        self.addSeparator()
        for action in (settings_action, export_action):
            self.addAction(action)
            button = self.widgetForAction(action)
            button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # a tool button skips Tab otherwise
            name = action.text().replace("&", "").rstrip("…").lower()
            explain(button, name, action.toolTip())
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.addWidget(spacer)
        self.talk_button = explain(
            QPushButton("Hold to talk"), "push to talk",
            "Push-to-talk: the model hears you only while this button (or Space) is held.",
        )  # fmt: skip
        self.talk_button.pressed.connect(lambda: self.talk.emit(True))
        self.talk_button.released.connect(lambda: self.talk.emit(False))
        self.talk_action = self.addWidget(self.talk_button)
        self.talk_action.setVisible(False)

    def offer_arms(self, arms: Sequence[Arm | str]) -> None:
        """List only ``arms`` (each with its meaning), keeping the shown one where it is listed;
        none: the box rests, saying that arms do not apply to this model."""
        shown = self.arm.currentData()
        self.arm.blockSignals(True)
        self.arm.clear()
        for arm in (Arm(a) for a in arms):  # Qt keeps a StrEnum as a plain str: store values
            self.arm.addItem(f"{arm.value} — {ARM_WORDS[arm]}", arm.value)
            self.arm.setItemData(self.arm.count() - 1, ARM_WORDS[arm], Qt.ItemDataRole.ToolTipRole)
        if not arms:
            self.arm.addItem(NO_ARMS, shown)
        index = self.arm.findData(shown)
        self.arm.setCurrentIndex(max(index, 0))
        self.arm.setEnabled(bool(arms))
        self.arm.blockSignals(False)

    def show_arm(self, arm: Arm) -> None:
        """Show ``arm`` without emitting ``arm_chosen``."""
        index = self.arm.findData(Arm(arm).value)
        if index >= 0 and index != self.arm.currentIndex():
            self.arm.setCurrentIndex(index)

    def show_running(self, state: str) -> None:
        """Button text and colour for the controller state (idle, loading, running, stopping)."""
        running = state in ("loading", "running")
        self.start_button.setText("■  Stop" if running else "▶  Start")
        self.start_button.setToolTip(
            "Stop the conversation after the period in flight (F5 or Esc)."
            if running
            else "Start the conversation: load the model and listen (F5)."
        )
        self.start_button.setEnabled(state != "stopping")
        self.start_button.setProperty("running", "true" if running else "false")
        style = self.start_button.style()
        style.unpolish(self.start_button)
        style.polish(self.start_button)

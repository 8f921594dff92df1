"""Validate settings off the GUI thread.

``app.settings.check_settings`` may import torch and ask for CUDA (device ``auto``/``cuda``) and
reads the checkpoint folder: seconds on a cold start, and a CUDA query the GUI thread must not
make. So the dialog runs it on a pool thread and hears back by signal.
"""

from __future__ import annotations

import traceback

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from app.settings import Settings, SettingsError, check_settings

__all__ = ["SettingsCheck"]


class _Signals(QObject):
    passed = Signal(object)  # the Settings that passed
    failed = Signal(str)  # the message (names the fix)


class SettingsCheck(QRunnable):
    """``check_settings(settings)`` on a pool thread; ``signals.passed``/``failed`` report."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.signals = _Signals()

    def run(self) -> None:
        try:
            check_settings(self.settings)
        except SettingsError as exc:
            self.signals.failed.emit(str(exc))
            return
        except Exception as exc:  # an unexpected failure is still the user's to see
            traceback.print_exc()
            self.signals.failed.emit(
                f"These settings could not be checked ({exc}); the terminal shows the details."
            )
            return
        self.signals.passed.emit(self.settings)

    def start(self, pool: QThreadPool | None = None) -> None:
        (pool or QThreadPool.globalInstance()).start(self)

"""Desktop-app tests: real Qt on the offscreen platform, the small CPU model, espeak-ng speech.

Every test gets its own config and data folders (``XDG_CONFIG_HOME``/``XDG_DATA_HOME`` in a temp
dir), so settings, window geometry and session traces never touch the user's. The offscreen
platform is chosen before Qt loads (set ``QT_QPA_PLATFORM`` yourself to watch under a display).
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import Settings, save_settings

# A hang guard on a session's build or its first periods, never a speed bar: the small model
# builds in seconds on two idle cores, but took 54 s with the machine at load 9 (and failed a
# 60-s guard at load 10); a conversation that hangs still fails, five minutes on.
SESSION_MS = 300_000


def small_cpu_settings(**changes: object) -> Settings:
    """The small Token2Wav on the CPU (``synthetic``, named: the default is the basic voice): a
    session builds in seconds and keeps real time here."""
    values: dict[str, object] = {"family": "synthetic", "model_size": "small", "device": "cpu"}
    values.update(changes)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Platform config and data folders inside the test's temp dir."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Two shared cores: torch's intra-op threads only add barrier waits (14x slower here)."""


@pytest.fixture
def gui_app(qapp: object) -> object:
    """pytest-qt's QApplication, styled like the real app."""
    from app.gui.launch import create_application

    return create_application([])


@pytest.fixture
def settings_file(tmp_path: Path) -> Path:
    path = tmp_path / "config" / "duplexcadence" / "settings.yaml"
    save_settings(small_cpu_settings(), path)
    return path


@pytest.fixture(scope="session")
def talk_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user talking: two utterances with pauses the synthetic backbone answers in."""
    from tests.speech import conversation

    talk = conversation(
        [0.3, "hello there, how are you doing today", 2.5, "tell me about the weather", 3.5]
    )
    return talk.write(tmp_path_factory.mktemp("talk") / "talk.wav")


@pytest.fixture
def make_window(
    gui_app: object, qtbot: object, settings_file: Path, tmp_path: Path, talk_wav: Path
) -> Iterator[object]:
    """Build a MainWindow fed by ``talk_wav`` (unpaced unless ``realtime``), recording only."""
    from app.gui.window.main_window import MainWindow
    from app.gui.worker.routes import AudioRoute

    windows: list[MainWindow] = []

    def make(realtime: bool = False, wav: Path | None = None) -> MainWindow:
        route = AudioRoute(input_wav=wav or talk_wav, realtime=realtime, output="none")
        window = MainWindow(
            settings_file=settings_file,
            route=route,
            sessions_dir=tmp_path / "sessions",
            export_dir=tmp_path,
        )
        qtbot.addWidget(window)  # type: ignore[attr-defined]
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.controller.shutdown(timeout_s=30)

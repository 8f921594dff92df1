"""The transcript: both sides, fed live from each period's ``heard`` (the user, where the family
runs a recognizer) and ``text`` (the assistant), kept per session, written beside the trace as
``<trace>.transcript.txt`` and exported with the rest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pytestqt.qtbot import QtBot

from app.gui.export.writers import ExportKind
from app.transcript import Transcript, transcript_path
from tests.gui.conftest import SESSION_MS

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


class _Said:
    """A period's outcome with the ``text`` and ``heard`` a family with a recognizer gives."""

    def __init__(self, outcome: Any, text: str, heard: str) -> None:
        self._outcome, self.text, self.heard = outcome, text, heard

    def __getattr__(self, name: str) -> Any:
        return getattr(self._outcome, name)


@pytest.fixture
def talking_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every second period the assistant says a word: `` w<index>`` (its own leading space); in
    period 1 the user's question is heard."""
    from app.session import Session

    step = Session.step

    def said(self: Session, mic: Any, facts: dict[str, Any] | None = None) -> Any:
        outcome = step(self, mic, facts)
        index = outcome.record.index
        heard = "how are you" if index == 1 else ""
        return _Said(outcome, f" w{index}" if index % 2 == 0 else "", heard)

    monkeypatch.setattr(Session, "step", said)


def test_transcript_lines_join_one_speakers_pieces() -> None:
    transcript = Transcript()
    transcript.add(1.0, "Assistant", " hel")  # subword pieces carry their own spacing
    transcript.add(1.1, "Assistant", "lo")
    transcript.add(2.0, "Assistant", " there ")
    transcript.add(2.5, "Assistant", "")
    transcript.add(63.0, "You", "hi")
    assert transcript.text() == "[00:01.0] Assistant: hello there\n[01:03.0] You: hi\n"
    transcript.add_period(64.0, "how are you", "")  # a second utterance: its own words, spaced
    transcript.add_period(65.0, "doing", " Fine, thanks.")  # the user's side first
    assert transcript.lines()[-2].text == "hi how are you doing"
    assert transcript.text().endswith(
        "] You: hi how are you doing\n[01:05.0] Assistant: Fine, thanks.\n"
    )
    assert transcript_path(Path("/x/session-1.jsonl")) == Path("/x/session-1.transcript.txt")


def test_the_transcript_shows_live_is_kept_per_session_and_is_written_and_exported(
    make_window: Callable[..., MainWindow], qtbot: QtBot, tmp_path: Path, talking_session: None
) -> None:
    window = make_window(realtime=True)  # at the talk's pace: it runs while the file is read
    with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS):
        window.start_conversation()
    qtbot.waitUntil(lambda: "w4" in window.transcript.text(), timeout=SESSION_MS)
    assert window.transcript.text().startswith("[00:00.")
    # Written beside the trace as it goes, not only at the end (a crash must not lose it).
    assert window.controller.trace is not None
    live = transcript_path(window.controller.trace)
    qtbot.waitUntil(lambda: live.is_file() and "w4" in live.read_text(), timeout=SESSION_MS)
    assert window.controller.state.value == "running"
    assert "Saved as it goes to" in window.transcript.note.text()
    lines = window.transcript.text().splitlines()
    assert [line.split("] ")[1] for line in lines[:3]] == [
        "Assistant: w0", "You: how are you", "Assistant: w2 w4"
    ]  # fmt: skip
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
        window.stop_conversation()
    shown = window.transcript.text()
    trace = window.controller.trace
    assert trace is not None
    beside = transcript_path(trace)
    assert beside.read_text() == shown  # beside the trace, as shown

    out = tmp_path / "export"
    out.mkdir()
    dialog = window.open_export()
    assert dialog.boxes[ExportKind.TRANSCRIPT].isEnabled()
    dialog.reject()
    with qtbot.waitSignal(window.exports.done, timeout=SESSION_MS):
        window.exports.export_to(out, "talk", [ExportKind.TRANSCRIPT])
    assert (out / "talk.transcript.txt").read_text() == shown

    # A new session starts a new transcript (the old one stays beside its trace).
    with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS):
        window.start_conversation()
    qtbot.waitUntil(lambda: len(window.panel.history) >= 1, timeout=SESSION_MS)
    assert window.transcript.text().count("w0") == 1
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
        window.stop_conversation()
    assert beside.read_text() == shown


def test_a_model_without_text_offers_no_transcript_export(
    make_window: Callable[..., MainWindow], qtbot: QtBot
) -> None:
    window = make_window()
    assert "without text" in window.transcript.view.placeholderText()
    with qtbot.waitSignal(window.controller.ready, timeout=SESSION_MS):
        window.start_conversation()
    qtbot.waitUntil(lambda: len(window.panel.history) >= 2, timeout=SESSION_MS)
    with qtbot.waitSignal(window.controller.ended, timeout=SESSION_MS):
        window.stop_conversation()
    assert window.transcript.text() == ""
    dialog = window.open_export()
    assert not dialog.boxes[ExportKind.TRANSCRIPT].isEnabled()
    assert "without a transcript" in dialog.boxes[ExportKind.TRANSCRIPT].toolTip()
    dialog.reject()
    assert window.controller.trace is not None
    assert not transcript_path(window.controller.trace).exists()

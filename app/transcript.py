"""A conversation's transcript: who said what, when. No Qt.

The loop adds each period's two sides (:meth:`Transcript.add_period`): what the user said as the
family's recognizer heard it (the period's ``heard``, "You") and what the assistant said (its
``text``, "Assistant"), each where the family has it; consecutive pieces from one speaker join
into one line, so a model that emits a word every 80 ms still reads as sentences. Any thread may
take :meth:`Transcript.text` (export) while the engine adds; the lines are copied under a lock.
A line's time is where its period begins in the session's audio (:func:`audio_time`), so it
lines up with the recordings whether the periods ran at the wall clock or back to back.

The desktop app and ``duplexcadence converse`` both write it beside their trace with
:func:`write_beside` (``<trace>.transcript.txt``); ``duplexcadence export`` rebuilds it from the
trace's JSONL (:func:`transcript_from_trace`), whose period records hold the same two sides.
The desktop app also keeps that file current while the conversation runs (:class:`LiveFile`), so
a crash loses at most the last half second of it.
"""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from engine.files import atomic_write
from engine.trace import stream_trace

__all__ = [
    "ASSISTANT",
    "USER",
    "Line",
    "LiveFile",
    "Transcript",
    "audio_time",
    "transcript_from_trace",
    "transcript_path",
    "write_beside",
]

USER, ASSISTANT = "You", "Assistant"  # the speakers, as the transcript names them


def audio_time(index: int, period_s: float) -> float:
    """Seconds into the session's audio where period ``index`` begins: a transcript line's time."""
    return index * period_s


def transcript_path(trace: Path) -> Path:
    """Where a session's transcript goes beside its trace: ``<stem>.transcript.txt``."""
    return trace.with_name(f"{trace.stem}.transcript.txt")


@dataclass
class Line:
    t_s: float  # session seconds where the line began
    speaker: str  # ASSISTANT or USER
    text: str

    def render(self) -> str:
        minutes, seconds = divmod(self.t_s, 60.0)
        return f"[{int(minutes):02d}:{seconds:04.1f}] {self.speaker}: {self.text}"


class Transcript:
    """The lines so far (see the module doc)."""

    def __init__(self) -> None:
        self._lines: list[Line] = []
        self._lock = threading.Lock()

    def add(self, t_s: float, speaker: str, piece: str) -> None:
        """Append ``piece``; it continues the last line when the same speaker said it.

        A piece carries its own spacing (``engine.duplex.PeriodStep.text``: a word that starts
        in it starts with a space), so one speaker's pieces join as they are.
        """
        if not piece.strip():
            return
        with self._lock:
            last = self._lines[-1] if self._lines else None
            if last is not None and last.speaker == speaker:
                last.text = f"{last.text}{piece}".rstrip()
            else:
                self._lines.append(Line(t_s, speaker, piece.strip()))

    def add_period(self, t_s: float, heard: str, said: str) -> None:
        """One period's two sides: the user's words first (they were heard before the answer
        they prompt), then the assistant's. A recognized utterance is whole: it starts a line
        of its own (with a space, should the last line be the user's too)."""
        self.add(t_s, USER, f" {heard.strip()}" if heard.strip() else "")
        self.add(t_s, ASSISTANT, said)

    def lines(self) -> list[Line]:
        with self._lock:
            return [Line(line.t_s, line.speaker, line.text) for line in self._lines]

    def text(self) -> str:
        """The whole transcript, a line per turn ("" when nobody said anything in text)."""
        return "".join(line.render() + "\n" for line in self.lines())

    def write(self, path: Path, *, overwrite: bool = True) -> Path:
        """Write :meth:`text` to ``path`` atomically (UTF-8); ``overwrite=False`` refuses a
        file already there (``engine.files.OutputError``, naming ``--force``)."""
        text = self.text()
        return atomic_write(path, lambda f: f.write(text), text=True, overwrite=overwrite)


def write_beside(transcript: Transcript, trace: Path, *, overwrite: bool) -> Path | None:
    """``<trace>.transcript.txt`` beside ``trace`` when anything was said in text; returns its
    path (None: nothing said, nothing written). Atomic; an existing file is replaced only with
    ``overwrite`` (else ``engine.files.OutputError``)."""
    if not transcript.lines():
        return None
    return transcript.write(transcript_path(trace), overwrite=overwrite)


class LiveFile:
    """Keeps ``path`` equal to ``transcript`` while it grows, written by a thread of its own.

    The engine thread calls :meth:`changed` after a period that said something (it only sets an
    event: the disk's fsync never delays a period); the writer rewrites the file atomically at
    most every ``every_s`` seconds. :meth:`close` writes what is left and ends the thread. The
    first write refuses a file already at ``path`` (someone else's: the trace's name is new),
    later ones replace our own. A write that fails is printed once and tried again later.
    """

    def __init__(self, transcript: Transcript, path: Path, every_s: float = 0.5) -> None:
        self.transcript, self.path, self.every_s = transcript, path, every_s
        self.written = ""  # the text on disk now
        self._changed = threading.Event()
        self._closing = threading.Event()
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="transcript-file", daemon=True)
        self._thread.start()

    def changed(self) -> None:
        """The transcript has news: write it soon (any thread; never blocks)."""
        self._changed.set()

    def close(self) -> None:
        """Write what is left and end the writer (idempotent)."""
        self._closing.set()
        self._changed.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._closing.is_set():
            self._changed.wait()
            self._closing.wait(self.every_s)  # gather a half second of periods per write
            self._changed.clear()
            self._write()
        self._write()

    def _write(self) -> None:
        text = self.transcript.text()
        if text == self.written or not text:
            return
        if not self.path.parent.is_dir():
            return  # the sessions folder went away: the export still has the transcript
        try:
            atomic_write(
                self.path, lambda f: f.write(text), text=True, overwrite=bool(self.written)
            )
        except OSError:
            if not self._failed:
                traceback.print_exc()
            self._failed = True
            return
        self.written = text


def transcript_from_trace(jsonl: Path) -> Transcript:
    """The transcript a trace's period records hold (``loop.heard``/``loop.text``), streamed;
    raises ``engine.trace.TraceError`` for a file that is not a trace."""
    transcript = Transcript()
    _, records = stream_trace(jsonl)
    for record in records:
        loop = record.get("loop") or {}
        heard, said = str(loop.get("heard") or ""), str(loop.get("text") or "")
        if heard or said:
            at = audio_time(int(record["index"]), float(record["period_s"]))
            transcript.add_period(at, heard, said)
    return transcript

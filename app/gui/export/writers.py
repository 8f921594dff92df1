"""Write a session's trace, audio and transcript to files: Perfetto JSON, CSV, JSONL, two WAVs
and a text file. No Qt.

Every file is written with ``engine.files.atomic_write`` (a temporary file in the destination
folder, flushed, then renamed over the name), so a failure or a crash midway never leaves a half
file and never damages an earlier export of the same name. The trace exports read the live JSONL,
which is safe while the session is still writing it: the trace writer appends whole lines, and a
last line caught mid-write is left out (``engine.trace.read_trace`` tolerates it; the JSONL copy
stops at the last newline).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import IO

from app.gui.worker.recorder import ChannelSnapshot
from app.periods import write_wav
from engine.files import atomic_write

__all__ = ["ExportError", "ExportKind", "export_paths", "export_session"]


class ExportError(ValueError):
    """An export that cannot be done; the message names the fix."""


class ExportKind(StrEnum):
    PERFETTO = "perfetto"
    CSV = "csv"
    JSONL = "jsonl"
    MIC = "mic"
    ASSISTANT = "assistant"
    TRANSCRIPT = "transcript"

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def from_audio(self) -> bool:
        """Written from the session's recorded audio."""
        return self in (ExportKind.MIC, ExportKind.ASSISTANT)

    @property
    def from_trace(self) -> bool:
        """Written from the session's trace (else from its recorded audio)."""
        return self in _TRACE_KINDS


_SUFFIX = {
    ExportKind.PERFETTO: ".json",
    ExportKind.CSV: ".csv",
    ExportKind.JSONL: ".jsonl",
    ExportKind.MIC: "-mic.wav",
    ExportKind.ASSISTANT: "-assistant.wav",
    ExportKind.TRANSCRIPT: ".transcript.txt",
}
_LABELS = {
    ExportKind.PERFETTO: "Trace for Perfetto (.json)",
    ExportKind.CSV: "Periods as CSV (.csv)",
    ExportKind.JSONL: "Raw trace (.jsonl)",
    ExportKind.MIC: "Microphone audio (-mic.wav)",
    ExportKind.ASSISTANT: "Assistant audio (-assistant.wav)",
    ExportKind.TRANSCRIPT: "Transcript (.transcript.txt)",
}
_TRACE_KINDS = frozenset({ExportKind.PERFETTO, ExportKind.CSV, ExportKind.JSONL})


def export_paths(folder: Path, stem: str, kinds: Iterable[ExportKind]) -> dict[ExportKind, Path]:
    """The file each kind is written to: ``<folder>/<stem><suffix>``."""
    return {kind: folder / f"{stem}{_SUFFIX[kind]}" for kind in kinds}


def _copy_whole_lines(trace: Path, out: Path) -> Path:
    data = trace.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]  # a line caught mid-write stays out

    def write(f: IO[bytes]) -> None:
        f.write(complete)

    return atomic_write(out, write)


_Channels = tuple[ChannelSnapshot, ChannelSnapshot]  # the recorder's (mic, assistant)


def _check(
    folder: Path,
    kinds: set[ExportKind],
    trace: Path | None,
    channels: _Channels | None,
    transcript: str | None,
) -> None:
    if not kinds:
        raise ExportError("nothing selected: tick at least one kind of file to export")
    if not folder.is_dir():
        raise ExportError(f"export folder {folder} does not exist: choose an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"export folder {folder} is not writable: choose a folder you can write")
    if kinds & _TRACE_KINDS and (trace is None or not trace.is_file()):
        raise ExportError("no session trace yet: start a conversation, then export its trace")
    if any(kind.from_audio for kind in kinds) and channels is None:
        raise ExportError("no session audio yet: start a conversation, then export its audio")
    if ExportKind.TRANSCRIPT in kinds and transcript is None:
        raise ExportError("no transcript yet: start a conversation, then export what was said")


def export_session(
    folder: Path,
    stem: str,
    kinds: Iterable[ExportKind],
    *,
    trace: Path | None,
    channels: _Channels | None,
    transcript: str | None = None,
) -> list[Path]:
    """Write the selected files; returns their paths. Raises ``ExportError`` naming the fix.

    ``trace`` is the session's live JSONL; ``channels`` the recorder's (mic, assistant)
    snapshot; ``transcript`` the session's transcript text ("" when nothing was said in text,
    None without a session). Runs on any thread but the engine's (it reads files and
    concatenates audio).
    """
    wanted = set(kinds)
    stem = stem.strip()
    if not stem or "/" in stem or stem.startswith("."):
        raise ExportError(f"file name {stem!r}: give a plain name like 'session-1', no slashes")
    _check(folder, wanted, trace, channels, transcript)
    paths = export_paths(folder, stem, sorted(wanted))
    return [_write(kind, out, trace, channels, transcript) for kind, out in paths.items()]


def _write(
    kind: ExportKind,
    out: Path,
    trace: Path | None,
    channels: _Channels | None,
    transcript: str | None,
) -> Path:
    """The file of ``kind`` at ``out``, from what :func:`_check` found to be there."""
    from engine.trace_export import export_csv, export_perfetto

    if kind is ExportKind.TRANSCRIPT:
        assert transcript is not None, "_check passes a transcript export only with a transcript"
        text = transcript
        return atomic_write(out, lambda f: f.write(text), text=True)
    if kind.from_trace:
        assert trace is not None, "_check passes a trace export only when there is a trace"
        if kind is ExportKind.PERFETTO:
            return export_perfetto(trace, out)
        if kind is ExportKind.CSV:
            return export_csv(trace, out)
        if out.resolve() == trace.resolve():  # the live trace onto itself: it is already there
            return out
        return _copy_whole_lines(trace, out)
    assert channels is not None, "_check passes an audio export only when there is audio"
    channel = channels[0 if kind is ExportKind.MIC else 1]
    return write_wav(out, channel.samples, channel.rate)

"""Write a session's trace and audio to files: Perfetto JSON, CSV, JSONL and two WAVs. No Qt.

Every file is written atomically — a temporary file in the destination folder, flushed, then
``os.replace``d over the name — so a failure or a crash midway never leaves a half file and never
damages an earlier export of the same name. The trace exports read the live JSONL, which is
safe while the session is still writing it: the trace writer appends whole lines, and a last
line caught mid-write is left out (``engine.trace.read_trace`` tolerates it; the JSONL copy
stops at the last newline).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from enum import StrEnum
from pathlib import Path
from typing import IO

import numpy as np

from app.gui.engine.recorder import ChannelSnapshot

__all__ = ["ExportError", "ExportKind", "export_paths", "export_session"]


class ExportError(ValueError):
    """An export that cannot be done; the message names the fix."""


class ExportKind(StrEnum):
    PERFETTO = "perfetto"
    CSV = "csv"
    JSONL = "jsonl"
    MIC = "mic"
    ASSISTANT = "assistant"

    @property
    def label(self) -> str:
        return _LABELS[self]


_SUFFIX = {
    ExportKind.PERFETTO: ".json",
    ExportKind.CSV: ".csv",
    ExportKind.JSONL: ".jsonl",
    ExportKind.MIC: "-mic.wav",
    ExportKind.ASSISTANT: "-assistant.wav",
}
_LABELS = {
    ExportKind.PERFETTO: "Trace for Perfetto (.json)",
    ExportKind.CSV: "Periods as CSV (.csv)",
    ExportKind.JSONL: "Raw trace (.jsonl)",
    ExportKind.MIC: "Microphone audio (-mic.wav)",
    ExportKind.ASSISTANT: "Assistant audio (-assistant.wav)",
}
_TRACE_KINDS = frozenset({ExportKind.PERFETTO, ExportKind.CSV, ExportKind.JSONL})


def export_paths(folder: Path, stem: str, kinds: Iterable[ExportKind]) -> dict[ExportKind, Path]:
    """The file each kind is written to: ``<folder>/<stem><suffix>``."""
    return {kind: folder / f"{stem}{_SUFFIX[kind]}" for kind in kinds}


def _atomic(out: Path, write: Callable[[IO[bytes]], None]) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; an export is an ordinary file
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _copy_whole_lines(trace: Path, out: Path) -> Path:
    data = trace.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]  # a line caught mid-write stays out

    def write(f: IO[bytes]) -> None:
        f.write(complete)

    return _atomic(out, write)


def _write_wav(channel: ChannelSnapshot, out: Path) -> Path:
    import soundfile

    def write(f: IO[bytes]) -> None:
        samples = np.asarray(channel.samples, dtype=np.int16)
        soundfile.write(f, samples, channel.rate, subtype="PCM_16", format="WAV")

    return _atomic(out, write)


def _check(
    folder: Path, kinds: set[ExportKind], trace: Path | None, channels: object | None
) -> None:
    if not kinds:
        raise ExportError("nothing selected: tick at least one kind of file to export")
    if not folder.is_dir():
        raise ExportError(f"export folder {folder} does not exist: choose an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"export folder {folder} is not writable: choose a folder you can write")
    if kinds & _TRACE_KINDS and (trace is None or not trace.is_file()):
        raise ExportError("no session trace yet: start a conversation, then export its trace")
    if kinds - _TRACE_KINDS and channels is None:
        raise ExportError("no session audio yet: start a conversation, then export its audio")


def export_session(
    folder: Path,
    stem: str,
    kinds: Iterable[ExportKind],
    *,
    trace: Path | None,
    channels: tuple[ChannelSnapshot, ChannelSnapshot] | None,
) -> list[Path]:
    """Write the selected files; returns their paths. Raises ``ExportError`` naming the fix.

    ``trace`` is the session's live JSONL; ``channels`` the recorder's (mic, assistant)
    snapshot. Runs on any thread but the engine's (it reads files and concatenates audio).
    """
    from engine.trace_export import export_csv, export_perfetto

    wanted = set(kinds)
    stem = stem.strip()
    if not stem or "/" in stem or stem.startswith("."):
        raise ExportError(f"file name {stem!r}: give a plain name like 'session-1', no slashes")
    _check(folder, wanted, trace, channels)
    written: list[Path] = []
    for kind, out in export_paths(folder, stem, sorted(wanted)).items():
        if kind in _TRACE_KINDS:
            assert trace is not None
            if kind is ExportKind.PERFETTO:
                written.append(export_perfetto(trace, out))
            elif kind is ExportKind.CSV:
                written.append(export_csv(trace, out))
            elif out.resolve() != trace.resolve():  # exporting the live trace onto itself
                written.append(_copy_whole_lines(trace, out))
            else:
                written.append(out)
        else:
            assert channels is not None
            written.append(_write_wav(channels[0 if kind is ExportKind.MIC else 1], out))
    return written

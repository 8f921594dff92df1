"""The session trace: one JSON line per native period, durable while the session runs.

File format (``.jsonl``, UTF-8, strict JSON: no NaN):

    {"type": "header", "format": 1, "declaration": ..., "arm": ..., "gpu": ..., ...}
    {"type": "period", "index": 0, "period_s": 1.0, "processing_s": ..., ...}
    ...

Durability: each line is written whole, flushed AND ``os.fsync``'d before ``write`` returns,
so a killed process (SIGKILL, power loss after the fsync) loses at most the period in flight,
and ``stream_trace`` (``read_trace``) tolerates the one truncated line such a kill can leave.

The path is checked when the writer is built, BEFORE the session starts: a trace that cannot
be written must fail at launch, not after an hour of talking. The file is an
:class:`engine.files.Output`: created without following a symlink, locked against a second run,
and, when it replaces an earlier trace (``overwrite``), written privately and renamed over it
only when the writer closes, so a run that fails (``abort``) leaves the earlier trace intact.
Export to Perfetto and CSV lives in ``engine.trace_export`` (``duplexcadence export`` rebuilds
them from the JSONL of an interrupted run).
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from engine.files import Output, OutputError, check_output

__all__ = [
    "TRACE_FORMAT",
    "TraceError",
    "TraceWriter",
    "check_trace_path",
    "read_trace",
    "session_metadata",
    "stream_trace",
]

TRACE_FORMAT = 1


class TraceError(ValueError):
    """A trace path or trace file that cannot be used; the message names the fix."""


class _HasToDict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


def check_trace_path(path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Return ``path`` as a ``Path`` if a trace can be written there, else raise ``TraceError``.

    Requires the ``.jsonl`` suffix, an existing writable folder, and (unless ``overwrite``)
    no file already there: a previous session's trace is evidence, never clobbered silently.
    """
    p = Path(path)
    if p.is_dir():
        raise TraceError(
            f"trace path {p} is a directory: name a file in it, e.g. {p}/session.jsonl"
        )
    if p.suffix != ".jsonl":
        raise TraceError(
            f"trace path {p} must end in .jsonl (one JSON line per period): "
            f"use {p.with_suffix('.jsonl')}"
        )
    try:
        check_output(p, overwrite=overwrite, flag="overwrite=True")
    except OutputError as error:
        raise TraceError(f"trace {error}") from None
    return p


def _nvidia_driver() -> str | None:
    """The NVIDIA kernel driver line (Linux), or None where there is none."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def session_metadata(
    *,
    declaration: str,
    arm: str,
    settings: Mapping[str, Any] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """The header facts every result must carry: declaration, arm, GPU, torch, Python, start time.

    Imports torch lazily, so a process that only reads or exports traces never pays for it.
    """
    import torch

    gpu, capability, gpu_bytes = "none", None, None
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        gpu, capability, gpu_bytes = props.name, f"{props.major}.{props.minor}", props.total_memory
    return {
        "declaration": declaration,
        "arm": arm,
        "device": device,
        "gpu": gpu,
        "gpu_capability": capability,
        "gpu_memory_bytes": gpu_bytes,
        "driver": _nvidia_driver(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pid": os.getpid(),
        "settings": dict(settings or {}),
        "start_wall_time": time.time(),
        "start_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _json_line(obj: Mapping[str, Any], what: str) -> str:
    """One strict-JSON line, or a ``TraceError`` saying which value broke it."""
    try:
        return json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n"
    except ValueError as exc:
        where = _non_finite(obj) or "a value"
        raise TraceError(
            f"{what}: {where} is NaN or infinite (strict JSON has neither): the input or the "
            "model produced non-finite numbers"
        ) from exc
    except TypeError as exc:
        raise TraceError(
            f"{what} is not strict JSON ({exc}): convert tensors with .item()/.tolist() "
            "before writing"
        ) from exc


def _non_finite(value: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN or inf in ``value``, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"`{path}`" if path else "a value"
    items: Any = ()
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


class TraceWriter:
    """Append-only JSONL trace: a header line at open, then one durable line per period.

    Args:
        path: the ``.jsonl`` file (checked by ``check_trace_path`` before anything is written).
        metadata: header facts (``session_metadata(...)`` gives the standard set).
        overwrite: replace an existing file instead of refusing.
        fsync: ``os.fsync`` after every line (default). Off only for benchmarks of the writer
            itself: without it a killed process may lose more than the period in flight.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        metadata: Mapping[str, Any],
        *,
        overwrite: bool = False,
        fsync: bool = True,
    ) -> None:
        self.path = check_trace_path(path, overwrite=overwrite)
        self._fsync = fsync
        self.periods_written = 0
        header = {"type": "header", "format": TRACE_FORMAT, **metadata}
        line = _json_line(header, "trace metadata")  # before opening: a bad header leaves no file
        try:
            self._output: Output | None = Output(
                self.path, overwrite=overwrite, text=True, flag="overwrite=True"
            )
        except OutputError as exc:
            raise TraceError(f"trace {exc}") from None
        except OSError as exc:
            raise TraceError(f"cannot open trace {self.path} ({exc}): choose another path") from exc
        self._append(line)

    def write(self, record: _HasToDict | Mapping[str, Any]) -> None:
        """Append one period (a ``PeriodRecord`` or its dict); durable when this returns."""
        data = record if isinstance(record, Mapping) else record.to_dict()
        self._append(_json_line({"type": "period", **data}, f"period {data.get('index')}"))
        self.periods_written += 1

    def _append(self, line: str) -> None:
        if self._output is None:
            raise TraceError(f"trace {self.path} is closed: open a new TraceWriter to write more")
        # One write of the whole line: a kill can truncate it, never interleave two periods.
        self._output.file.write(line)
        if self._fsync:
            self._output.sync()
        else:
            self._output.file.flush()

    def close(self) -> None:
        """Close the file, replacing the earlier trace if there was one (idempotent)."""
        if self._output is not None:
            output, self._output = self._output, None
            output.commit()

    def abort(self) -> None:
        """Close after a failure: an earlier trace stays as it was; a new one keeps what was
        written (idempotent)."""
        if self._output is not None:
            output, self._output = self._output, None
            output.abort()

    @property
    def closed(self) -> bool:
        return self._output is None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None or issubclass(exc_type, KeyboardInterrupt):
            self.close()  # an interrupted session is a session: its trace counts
        else:
            self.abort()


def _objects(path: Path, lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Parse JSON lines one at a time; only the LAST line may be broken (the period in flight at
    a kill: the next line is read ahead to know)."""
    number, line = 1, next(lines, None)
    while line is not None:
        following = next(lines, None)
        if line.strip():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                if following is None:
                    return  # truncated tail of a killed writer
                raise TraceError(
                    f"{path}:{number} is not valid JSON ({exc}) and is not the last line: "
                    "the trace is corrupt beyond a killed write; restore it or re-record"
                ) from exc
            if not isinstance(obj, dict):
                raise TraceError(
                    f"{path}:{number} is not a JSON object: is this a DuplexCadence trace?"
                )
            yield obj
        number, line = number + 1, following


def _lines(path: Path) -> Iterator[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            yield from f
    except OSError as exc:
        raise TraceError(f"cannot read trace {path} ({exc}): check the path") from exc


def stream_trace(
    path: str | os.PathLike[str],
) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """Read a trace as it is stored: ``(header, period records one at a time)``.

    The header is read and checked now; the records are read as they are iterated, so a trace
    of any length takes the memory of one line (a corrupt line raises ``TraceError`` when it
    is reached). A truncated last line is left out, and a file cut inside the header (a
    session killed before its first period) reads as an error, since without the header
    nothing in it can be labelled.
    """
    p = Path(path)
    objs = _objects(p, _lines(p))
    first = next(objs, None)
    if first is None or first.get("type") != "header":
        raise TraceError(f"{p} has no header line: pass a trace written by TraceWriter")
    header = {k: v for k, v in first.items() if k != "type"}
    if header.get("format", TRACE_FORMAT) > TRACE_FORMAT:
        raise TraceError(
            f"{p} has trace format {header['format']} > {TRACE_FORMAT}: upgrade duplexcadence"
        )
    records = (
        {k: v for k, v in obj.items() if k != "type"} for obj in objs if obj.get("type") == "period"
    )
    return header, records


def read_trace(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read a whole trace: ``(header, period records)``, as :func:`stream_trace` reads it."""
    header, records = stream_trace(path)
    return header, list(records)

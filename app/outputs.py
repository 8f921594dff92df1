"""Every file a command will write, checked before any model loads, the same way in every command.

``synth``, ``converse`` and ``demo`` name their outputs (a WAV, a trace and the files derived
beside it, recordings) and their inputs; :func:`check_outputs` refuses, in one line naming the
option, the path and the fix:

* an output that is one of the inputs (``--output`` equal to ``--input`` would overwrite the
  recording), or two outputs with one name;
* an output that is a folder, in a missing or read-only folder, or being written by another run;
* an output that already exists, unless ``--force`` (a previous run's results are evidence, and
  ``--trace out/mydata.json`` must not silently replace an unrelated ``out/mydata.csv``);
* a filesystem without room for the run: :data:`WAV_BYTES_PER_S` per second of each WAV plus
  :data:`TRACE_BYTES_PER_PERIOD` per period of a trace and its exports.

Once checked, a run holds its outputs with :func:`claim_outputs` until it ends
(:mod:`engine.claims`), so a second run naming one of them is refused by its checks, before its
models load, even while the first is still loading and has not opened its files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from engine.claims import ClaimedElsewhere, claim
from engine.files import OutputError, check_output
from engine.sizes import byte_text

__all__ = [
    "TRACE_BYTES_PER_PERIOD",
    "WAV_BYTES_PER_S",
    "OutputsError",
    "check_outputs",
    "claim_outputs",
    "run_bytes",
]

WAV_BYTES_PER_S = 2 * 48_000  # 16-bit mono up to 48 kHz: an upper bound for every family's rate
TRACE_BYTES_PER_PERIOD = 32 << 10  # JSONL + Perfetto + CSV; a CPU period measures ~6 KB in all
UNKNOWN_LENGTH_S = 600  # a run on devices without --seconds: room for ten minutes at the start


class OutputsError(ValueError):
    """An output a command cannot write as asked; the message names the option and the fix."""


def run_bytes(seconds: float | None, wavs: int, traced: bool) -> int:
    """Bytes a run of ``seconds`` (None: unknown) may write: ``wavs`` WAVs and maybe a trace."""
    s = UNKNOWN_LENGTH_S if seconds is None else seconds
    return int(s * (wavs * WAV_BYTES_PER_S + (TRACE_BYTES_PER_PERIOD if traced else 0)))


def check_outputs(
    outputs: Sequence[tuple[str, Path]],
    *,
    inputs: Sequence[tuple[str, Path]] = (),
    force: bool = False,
    bytes_needed: int = 0,
) -> None:
    """Check ``outputs`` (``(option, path)``) against ``inputs`` and the disk; see the module."""
    seen: dict[str, str] = {}
    for option, path in outputs:
        for input_option, source in inputs:
            if _same_file(path, source):
                raise OutputsError(
                    f"{option} {path} is the {input_option} file: choose another name "
                    "(an input is never overwritten)"
                )
        key = os.path.abspath(path)
        if key in seen:
            raise OutputsError(f"{option} {path} is also {seen[key]}: give each its own name")
        seen[key] = f"{option}"
        try:
            check_output(path, overwrite=force, flag="--force")
        except OutputError as error:
            raise OutputsError(f"{option} {error}") from None
    _check_space([path for _, path in outputs], bytes_needed)


@contextmanager
def claim_outputs(outputs: Sequence[tuple[str, Path]], *, force: bool = False) -> Iterator[None]:
    """Hold the claim on every output of ``outputs`` while the block runs (the run, models
    loading included); each is checked again once claimed, so a run that ended between the
    checks and the claim is seen too. An :class:`OutputsError` when another run holds one."""
    with ExitStack() as claims:
        for option, path in outputs:
            try:
                claims.enter_context(claim(path))
                check_output(path, overwrite=force, flag="--force")
            except (ClaimedElsewhere, OutputError) as error:
                raise OutputsError(f"{option} {error}") from None
        yield


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _check_space(paths: Sequence[Path], bytes_needed: int) -> None:
    """Each output folder must have room for the whole run (conservative where they differ)."""
    for folder in dict.fromkeys(path.parent for path in paths):
        free = shutil.disk_usage(folder).free
        if free < bytes_needed:
            raise OutputsError(
                f"{folder} has {byte_text(free, 'MiB', 0)} free; this run may write up to "
                f"{byte_text(bytes_needed, 'MiB', 0)}: free some space or write elsewhere"
            )

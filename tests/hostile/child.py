"""Run a command of the project in a child process, bounded in time and memory.

The hostile suite's point is often "no traceback, no hang, no runaway", which only a separate
process shows: :func:`run` starts ``python -c`` with the worktree first on the path, caps its
address space with ``RLIMIT_AS`` (set in the child before Python imports anything of ours) and
its wall time with a timeout, and returns what it printed. :func:`assert_clean` is the common
verdict: it ended by itself, with no Python traceback on either stream.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEMORY_BYTES = 3 << 30  # torch's CPU import maps ~1.5 GB of address space; a runaway needs far more


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def _prelude(memory: int) -> str:
    return textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
        sys.path.insert(0, {str(ROOT)!r})
    """)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "QT_QPA_PLATFORM": "offscreen",
    }


def run(
    code: str, *, timeout: float = 60, memory: int = MEMORY_BYTES, cwd: Path | None = None
) -> Result:
    """Run Python ``code`` in a bounded child; a timeout fails the test (a hang)."""
    done = subprocess.run(
        [sys.executable, "-c", _prelude(memory) + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=_env(),
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def start(
    code: str, *, memory: int = MEMORY_BYTES, cwd: Path | None = None
) -> subprocess.Popen[str]:
    """Start Python ``code`` in a bounded child, in a session of its own, and return at once
    (the caller ends it; its output goes to pipes)."""
    return subprocess.Popen(
        [sys.executable, "-c", _prelude(memory) + textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=_env(),
        start_new_session=True,
    )


def cli(
    *argv: str, timeout: float = 60, memory: int = MEMORY_BYTES, cwd: Path | None = None
) -> Result:
    """``duplexcadence ARGV...`` in a bounded child."""
    return run(
        f"from app.cli import main\nsys.exit(main({list(argv)!r}))",
        timeout=timeout,
        memory=memory,
        cwd=cwd,
    )


def assert_clean(result: Result) -> None:
    """It ended by itself (no signal: not killed for memory), with no Python traceback."""
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    for stream in (result.stdout, result.stderr):
        assert "Traceback (most recent call last)" not in stream, stream[-3000:]
    assert "MemoryError" not in result.stderr, result.stderr[-2000:]


def one_line_error(result: Result, *needles: str) -> str:
    """A clean failure whose stderr's last line names every needle; returns that line."""
    assert_clean(result)
    assert result.returncode != 0, result.stdout[-2000:]
    line = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative name -> bytes): to show nothing else was touched."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }

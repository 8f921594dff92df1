"""Run a command of the project in a child process, bounded in time and memory.

The hostile suite's point is often "no traceback, no hang, no runaway", which only a separate
process shows: :func:`run` starts a child with the worktree first on the path, its address
space capped with ``RLIMIT_AS`` (set before Python imports anything of ours) and its wall time
with a timeout, and returns what it printed. :func:`assert_clean` is the common verdict: it
ended by itself, with no Python traceback on either stream.

A child is forked from a zygote (:mod:`tests.hostile.zygote`: one process per bound, started
once, that has imported the project under that bound and nothing else): its own process, exit
status, streams, signals and session, as ``python -c`` would give, without paying the imports
again (seconds a child on a busy 2-core machine). Two bounds have one: :data:`MEMORY_BYTES`
(torch imported) and :data:`TORCH_FREE_BYTES` (commands that must end before torch loads: its
import alone maps more, so one that loaded it would fail). A child under another bound, or one
asked ``fresh`` (its peak memory is measured: a fork's would count the zygote's pages), is a
fresh ``python -c``. :func:`prestart` starts the zygotes early (the suite's conftest, at its
first test), so their imports run beside the suite's first tests.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEMORY_BYTES = 3 << 30  # torch's CPU import maps ~1.5 GB of address space; a runaway needs far more
TORCH_FREE_BYTES = 1 << 30  # commands that end before torch loads need little address space
_PRELOADS = {MEMORY_BYTES: "PRELOADED", TORCH_FREE_BYTES: "TORCH_FREE"}  # zygote.py's names


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def _prelude(memory: int) -> str:
    """A child's first lines: its memory bound, the worktree first on the path, and Ctrl-C
    raising ``KeyboardInterrupt`` as in a terminal's foreground command. A run in the
    background (``&`` without job control: a CI script's, a ``nohup``) ignores SIGINT, its
    children inherit that and Python keeps it ignored (as the product does: a background job
    stays deaf to Ctrl-C), so a Ctrl-C the suite sends would not reach them."""
    return textwrap.dedent(f"""
        import resource, signal, sys
        resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {str(ROOT)!r})
    """)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "QT_QPA_PLATFORM": "offscreen",
    }


class _Zygote:
    """The client of :mod:`tests.hostile.zygote`: one request at a time, one answer a line."""

    def __init__(self, memory: int) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="dc-zygote-"))
        self.children = 0
        serve = f"from tests.hostile import zygote\nzygote.serve(zygote.{_PRELOADS[memory]})\n"
        with open(self.folder / "zygote.err", "w") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _prelude(memory) + serve],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                bufsize=0, cwd=ROOT, env=_env(),
            )  # fmt: skip
        self.pending = b""
        self.loads_owed = 0  # answers to loads sent ahead (:meth:`load_ahead`), not yet read

    def ask(self, request: dict[str, object], timeout: float | None = None) -> dict[str, object]:
        """Send ``request``; its answer within ``timeout`` (else ``TimeoutError``: it is still
        owed, and :meth:`answer` takes it)."""
        while self.loads_owed:
            self.loads_owed -= 1
            _one_thread(self.answer())
        self._send(request)
        return self.answer(timeout)

    def _send(self, request: dict[str, object]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request).encode() + b"\n")

    def answer(self, timeout: float | None = None) -> dict[str, object]:
        assert self.process.stdout is not None
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            if not ready:
                raise TimeoutError
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                errors = (self.folder / "zygote.err").read_text()[-3000:]
                raise RuntimeError(f"the zygote ended: {errors}")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        answer: dict[str, object] = json.loads(line)
        return answer

    def share(self, argv: list[str]) -> None:
        """Have the zygote load the model ``converse argv`` loads (see its module)."""
        _one_thread(self.ask({"op": "load", "argv": argv}))

    def load_ahead(self, argv: list[str]) -> None:
        """:meth:`share`, answered later: the zygote loads while the caller goes on."""
        self._send({"op": "load", "argv": argv})
        self.loads_owed += 1

    def fork(self, code: str, cwd: Path | None, session: bool, shared: bool = False) -> Forked:
        self.children += 1
        out, err = (self.folder / f"{self.children}.{name}" for name in ("out", "err"))
        for path in (out, err):
            path.touch()  # readable at once (:meth:`Forked.output`), written by the child
        request = {"op": "run", "code": textwrap.dedent(code), "cwd": str(cwd or os.getcwd()),
                   "stdout": str(out), "stderr": str(err), "session": session,
                   "shared": shared}  # fmt: skip
        pid = self.ask(request)["pid"]
        assert isinstance(pid, int)
        return Forked(self, pid, out, err)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)  # it ends once its imports or a load ahead end
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_zygotes: dict[int, _Zygote] = {}  # by bound; started at its first child (or by prestart())


def _the_zygote(memory: int = MEMORY_BYTES) -> _Zygote:
    if memory not in _zygotes:
        _zygotes[memory] = _Zygote(memory)
        atexit.register(_zygotes[memory].close)  # ended with the test process
    return _zygotes[memory]


def _one_thread(answer: dict[str, object]) -> None:
    threads = answer["threads"]
    assert threads == 1, f"the load left {threads} threads: a fork would not copy them"


def prestart(shared: list[str] | None = None) -> None:
    """Start every zygote now; each imports while the caller goes on, and the one children
    under :data:`MEMORY_BYTES` fork from then loads the model ``converse shared`` loads, for
    the children handed it as loaded (:func:`run`'s ``shared``)."""
    for memory in _PRELOADS:
        _the_zygote(memory)
    if shared is not None:
        _the_zygote().load_ahead(shared)


class Forked:
    """A child forked from the zygote, with the part of ``subprocess.Popen``'s ways the suite
    uses; its streams are files (:meth:`output` reads them at any time), and a wait that times
    out ends it."""

    def __init__(self, zygote: _Zygote, pid: int, stdout: Path, stderr: Path) -> None:
        self.zygote, self.pid, self.returncode = zygote, pid, None
        self.paths = stdout, stderr

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.ask({"op": "wait", "pid": self.pid, "block": False})[
                "status"
            ]  # type: ignore[assignment]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                answer = self.zygote.ask({"op": "wait", "pid": self.pid, "block": True}, timeout)
            except TimeoutError:  # the zygote still waits: end the child, take its answer
                os.kill(self.pid, signal.SIGKILL)
                self.returncode = self.zygote.answer()["status"]  # type: ignore[assignment]
                raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout) from None
            self.returncode = answer["status"]  # type: ignore[assignment]
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # not reaped yet: the pid is still the child's
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def output(self) -> tuple[str, str]:
        """What it has printed so far: (stdout, stderr)."""
        stdout, stderr = (path.read_text(errors="replace") for path in self.paths)
        return stdout, stderr

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output()


def run(
    code: str,
    *,
    timeout: float = 60,
    memory: int = MEMORY_BYTES,
    cwd: Path | None = None,
    shared: list[str] | None = None,
    fresh: bool = False,
) -> Result:
    """Run Python ``code`` in a bounded child; a timeout fails the test (a hang).
    ``shared``: a ``converse`` command line whose model the child is handed as loaded (the
    zygote's, see :mod:`tests.hostile.zygote`) instead of loading it again; ``fresh``: in a
    fresh interpreter, not forked (see the module)."""
    if memory in _PRELOADS and not fresh:
        zygote = _the_zygote(memory)
        if shared is not None:
            zygote.share(shared)
        child = zygote.fork(code, cwd, session=False, shared=shared is not None)
        try:
            stdout, stderr = child.communicate(timeout)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(
                f"forked child {child.pid}", timeout, *child.communicate()
            ) from None
        return Result(child.wait(), stdout, stderr)
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


def start(code: str, *, cwd: Path | None = None, shared: list[str] | None = None) -> Forked:
    """Start Python ``code`` in a bounded child (forked), in a session of its own, and return
    at once (the caller ends it; its output is read once it has ended); ``shared`` as for
    :func:`run`."""
    zygote = _the_zygote()
    if shared is not None:
        zygote.share(shared)
    return zygote.fork(code, cwd, session=True, shared=shared is not None)


def start_fresh(
    code: str, *, memory: int = MEMORY_BYTES, cwd: Path | None = None
) -> subprocess.Popen[str]:
    """Start Python ``code`` in a fresh bounded child, in a session of its own, and return at
    once (the caller ends it; its output goes to pipes, read as it comes)."""
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

"""A second writer is refused before its models load (issue 27, "Deliver" 4).

A run claims its outputs right after its checks (:mod:`engine.claims`), so a second run naming
one of them is refused while the first is still loading, before it opens anything: ``synth``
as two real processes (the first held inside its loader, the second must never reach its own),
and the claim of every command (``converse``, ``demo``) against a run held in another process.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import cli
from app.converse import ConverseError, ConverseRequest, check_request
from app.demo import write_talk
from app.outputs import OutputsError, check_outputs
from app.settings import Settings
from tests.hostile.child import one_line_error, run, start, start_fresh

# The first run: real synth, held in its loader (it has claimed its outputs by then).
HELD_IN_LOADER = """
import pathlib, time
import app.synth

def loading(*args, **kwargs):
    pathlib.Path("loading").touch()
    time.sleep(600)

app.synth.speech_decoder = loading
from app.cli import main
sys.exit(main({argv!r}))
"""

# The second: real synth, whose loader must never run; once without --force, once with.
NEVER_LOADS = """
import app.synth

def loading(*args, **kwargs):
    print("the second run reached its loader", file=sys.stderr)
    sys.exit(99)

app.synth.speech_decoder = loading
from app.cli import main
first = main({argv!r})
print(first, file=sys.stderr)
sys.exit(main({argv!r} + ["--force"]))
"""


def _synth(out: Path) -> list[str]:
    return ["synth", "--voice-frames", "40", "--seconds", "1", "--device", "cpu",
            "--wav", str(out / "a.wav"), "--trace", str(out / "a.json")]  # fmt: skip


def test_a_second_synth_is_refused_while_the_first_loads(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    first = start(HELD_IN_LOADER.format(argv=_synth(out)), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "loading").exists():
            assert first.poll() is None, first.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the first run never reached its loader"
            time.sleep(0.05)
        second = run(NEVER_LOADS.format(argv=_synth(out)), cwd=tmp_path)
    finally:
        first.send_signal(signal.SIGKILL)  # the kernel drops its claim with it
        first.communicate(timeout=30)
    line = one_line_error(second, "a.jsonl is being written by another run: wait for it")
    assert second.returncode == cli.EXIT_USAGE, line
    refusals = second.stderr.strip().splitlines()
    assert refusals[-3] == refusals[-1] and refusals[-2] == str(cli.EXIT_USAGE), refusals
    assert list(out.iterdir()) == []  # neither opened a file
    check_outputs([("--wav", out / "a.wav")])  # the claim went with the killed process


HOLD = """
import pathlib, time
from engine.claims import claim
with claim(pathlib.Path({path!r})):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def held(tmp_path: Path) -> Iterator[None]:
    """A claim on ``tmp_path/o.wav`` held by another process, as a run that is loading."""
    holder = start_fresh(HOLD.format(path=str(tmp_path / "o.wav")), memory=1 << 30)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    yield
    holder.kill()
    holder.communicate(timeout=30)


@pytest.mark.usefixtures("held")
def test_the_checks_see_another_runs_claim(tmp_path: Path) -> None:
    """converse's checks, and check_outputs (synth's and demo's), before anything loads."""
    talk = write_talk(tmp_path / "talk.wav", 1)
    request = ConverseRequest(
        settings=Settings(family="synthetic"), input=talk, output=tmp_path / "o.wav"
    )
    with pytest.raises(ConverseError, match=r"--output .*o\.wav is being written by another run"):
        check_request(request)
    with pytest.raises(OutputsError, match="being written by another run"):
        check_outputs([("--out", tmp_path / "o.wav")], force=True)
    check_outputs([("--out", tmp_path / "other.wav")])  # one name is claimed, not the folder

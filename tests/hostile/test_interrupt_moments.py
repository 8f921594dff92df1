"""SIGTERM at every kind of moment of a ``converse`` run leaves playable WAVs and a whole JSONL
(issue 12, "Done when").

Each case runs the real command in a child that sends itself SIGTERM at the start of the
``nth`` call of one function: while the model loads, while the outputs open, between a period's
trace line and its audio, while the outputs close (replacing earlier files), inside the
Perfetto export, before the CSV export. The signal lands exactly there, every time: no sleeping,
no racing a timer. What the run must leave is checked by :func:`tests.hostile.whole.assert_whole`.
A moment after loading is reached on the model handed over as loaded (``shared``, see
:func:`tests.hostile.child.run`): the run from there on is the command's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.demo import write_talk
from tests.hostile.child import assert_clean, run
from tests.hostile.whole import assert_whole, converse_argv

TERMINATED = 143  # main's exit status after SIGTERM (128 + 15), inside the periods too
PERIODS = 6  # --seconds: enough periods to stop inside them, few enough to be quick

HOOK = """
import os, signal
import {module} as target

owner = target{owner}
original = getattr(owner, {name!r})
calls = 0

def hooked(*args, **kwargs):
    global calls
    calls += 1
    if calls == {nth}:
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line runs
    return original(*args, **kwargs)

setattr(owner, {name!r}, hooked)
from app.cli import main
sys.exit(main({argv!r}))
"""

# (function hit, its nth call, exit status, periods left: None = no outputs at all)
MOMENTS = {
    "loading": ("adapters.token2wav.hift:build_hift", 1, TERMINATED, None),
    "opening outputs": ("app.periods:WavSink.__init__", 1, TERMINATED, 0),
    "between trace line and audio": ("engine.trace:TraceWriter.write", 4, TERMINATED, 4),
    "closing outputs": ("engine.files:Output.commit", 1, TERMINATED, PERIODS),
    "inside the Perfetto export": ("engine.trace_export:_period_events", 3, TERMINATED, PERIODS),
    "before the CSV export": ("engine.trace_export:export_csv", 1, TERMINATED, PERIODS),
}


def hook_code(target: str, nth: int, argv: list[str]) -> str:
    module, _, attribute = target.partition(":")
    *owner, name = attribute.split(".")
    return HOOK.format(
        module=module, owner="".join(f".{o}" for o in owner), name=name, nth=nth, argv=argv
    )


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_talk(tmp_path_factory.mktemp("talk") / "talk.wav", 30)


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_sigterm_at_any_moment_leaves_whole_files(moment: str, talk: Path, tmp_path: Path) -> None:
    target, nth, status, periods = MOMENTS[moment]
    earlier = {"o.wav": b"an earlier recording", "t.jsonl": b"an earlier trace\n"}
    if moment == "closing outputs":  # the replacements are renamed over these as they close
        for name, data in earlier.items():
            (tmp_path / name).write_bytes(data)
    argv = converse_argv(tmp_path, talk, "--seconds", str(PERIODS), "--quiet", "--force")
    shared = None if periods is None else argv  # a moment after loading: the loaded model
    done = run(hook_code(target, nth, argv), timeout=240, cwd=tmp_path, shared=shared)
    assert_clean(done)
    assert done.returncode == status, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("duplexcadence: terminated (SIGTERM)"), last
    assert "Ctrl-C" not in done.stderr
    if periods is None:  # nothing was opened yet: nothing is left
        assert sorted(p.name for p in tmp_path.iterdir()) == [], done.stderr[-2000:]
        return
    assert assert_whole(tmp_path) == periods

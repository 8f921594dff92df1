"""Never clobber: symlinks are not followed, earlier results survive a failed run, two runs
cannot share one output, the umask is never touched (issue 12, "Never clobber")."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
import soundfile
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.periods import WavSink, write_wav
from engine.files import OutputError, atomic_write
from engine.trace import TraceError, TraceWriter, read_trace
from engine.trace_export import export_csv
from tests.hostile.child import cli, one_line_error, snapshot


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another user's private file, reachable through a symlink planted at an output name."""
    secret = tmp_path / "elsewhere" / "secret"
    secret.parent.mkdir()
    secret.write_text("do not touch")
    secret.chmod(0o600)
    return secret


def test_a_symlink_at_the_trace_path_is_never_followed(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "run.jsonl"
    link.symlink_to(victim)
    with pytest.raises(TraceError, match="already exists"):
        TraceWriter(link, {"declaration": "toy"})
    with TraceWriter(link, {"declaration": "toy"}, overwrite=True) as writer:
        writer.write({"index": 0})
    assert victim.read_text() == "do not touch"
    assert not link.is_symlink() and read_trace(link)[1] == [{"index": 0}]


def test_atomic_writes_and_wavs_replace_a_symlink_not_its_target(
    tmp_path: Path, victim: Path
) -> None:
    for name in ("out.csv", "out.wav"):
        (tmp_path / name).symlink_to(victim)
    atomic_write(tmp_path / "out.csv", lambda f: f.write(b"a,b\n"))
    sink = WavSink(tmp_path / "out.wav", 24_000, overwrite=True)
    sink.write(np.zeros(100, np.float32))
    sink.close()
    assert victim.read_text() == "do not touch"
    assert (tmp_path / "out.csv").read_bytes() == b"a,b\n"


def test_the_umask_is_never_changed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def forbidden(mask: int) -> int:
        raise AssertionError("os.umask races other threads")

    monkeypatch.setattr(os, "umask", forbidden)
    path = atomic_write(tmp_path / "a.txt", lambda f: f.write(b"x"))
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode & 0o600 == 0o600 and not mode & 0o111  # an ordinary file, not the private temp


def test_a_failed_run_leaves_earlier_results_intact(tmp_path: Path) -> None:
    keep_wav, keep_trace = tmp_path / "keep.wav", tmp_path / "keep.jsonl"
    soundfile.write(keep_wav, np.full(100, 0.5, np.float32), 24_000, subtype="PCM_16")
    with TraceWriter(keep_trace, {"declaration": "toy"}) as writer:
        writer.write({"index": 0})
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="NaN or infinite"):
        write_wav(keep_wav, np.full(10, np.nan, np.float32), 24_000)
    with (
        pytest.raises(RuntimeError, match="failed"),
        TraceWriter(keep_trace, {"declaration": "toy"}, overwrite=True) as writer,
    ):
        writer.write({"index": 0})
        raise RuntimeError("the run failed")
    assert snapshot(tmp_path) == before


def test_two_runs_cannot_write_one_output(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with (
        TraceWriter(path, {"declaration": "toy"}),
        pytest.raises(TraceError, match="another run"),
    ):
        TraceWriter(path, {"declaration": "toy"}, overwrite=True)
    first = WavSink(tmp_path / "run.wav", 24_000)
    with pytest.raises(ValueError, match="another run"):
        WavSink(tmp_path / "run.wav", 24_000, overwrite=True)
    first.close()


def test_derived_files_do_not_replace_unrelated_ones(tmp_path: Path) -> None:
    trace = tmp_path / "mydata.jsonl"
    with TraceWriter(trace, {"declaration": "toy"}) as writer:
        writer.write({"index": 0, "period_s": 1.0, "processing_s": 0.5})
    (tmp_path / "mydata.csv").write_text("the user's own table")
    with pytest.raises(TraceError, match="--force"):
        export_csv(trace, tmp_path / "mydata.csv", overwrite=False)
    assert (tmp_path / "mydata.csv").read_text() == "the user's own table"
    one_line_error(cli("export", str(trace), memory=1 << 30), "mydata", "--force")
    assert (tmp_path / "mydata.csv").read_text() == "the user's own table"
    (tmp_path / "mydata.csv").unlink()
    assert cli("export", str(trace), "--force", memory=1 << 30).returncode == 0
    assert (tmp_path / "mydata.csv").read_text().startswith("index,")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type": "header"}\n{"type": "period", "index": "x"}\n')
    one_line_error(cli("export", str(broken), memory=1 << 30), "broken.jsonl", "malformed")


@given(name=st.text(alphabet="abc./-_ ", min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_outputs_touch_nothing_but_their_name(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    folder = tmp_path_factory.mktemp("names")
    path = folder / name
    # An absolute name, or one climbing out with "..", is another place, not a name in it.
    assume(path.resolve().is_relative_to(folder.resolve()))
    (folder / "neighbour.csv").write_text("keep")
    before = snapshot(folder)
    try:
        atomic_write(path, lambda f: f.write(b"new"), overwrite=False)
    except (OutputError, OSError):
        assert snapshot(folder) == before
        return
    after = snapshot(folder)
    changed = {k for k in after if after[k] != before.get(k)} | (before.keys() - after.keys())
    assert changed <= {str(path.resolve().relative_to(folder.resolve()))}


def test_audio_that_is_no_result_can_be_discarded(tmp_path: Path) -> None:
    sink = WavSink(tmp_path / "nan.wav", 24_000)
    sink.write(np.full(10, np.nan, np.float32))
    assert sink.nonfinite == 10
    sink.abort(discard=True)  # what synth does when the model produced NaN
    assert list(tmp_path.iterdir()) == []

"""Nothing deleted: a run removes only the exact names it created (issue 27).

Output names with glob characters, and files beside an output that look like its temporary files
(a user's own ``.NAME.draft.tmp``, another writer's ``.NAME.<hex>.tmp``), survive every way of
writing: a whole file, a growing file that is committed, aborted or fails, new or replacing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.files import Output, atomic_write
from tests.hostile.child import snapshot

NAMES = ("a*.wav", "a?.wav", "a[b].wav", "[!x]*", "out.wav")


def _neighbours(folder: Path, name: str) -> dict[str, bytes]:
    """Files a glob over ``name``'s temporary names would catch; none is this run's."""
    planted = {
        f".{name}.draft.tmp": b"the user's draft",
        f".{name}.deadbeef.tmp": b"another writer's, or the user's",
        ".ab.wav.deadbeef.tmp": b"matches .a*.wav.*.tmp",
        ".ax.wav.0badcafe.tmp": b"matches .a?.wav.*.tmp",
        ".ab.wav": b"matches .a[b].wav",
        "ab.wav": b"a neighbour's result",
    }
    for neighbour, data in planted.items():
        (folder / neighbour).write_bytes(data)
    return planted


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("replacing", [False, True])
def test_every_write_removes_only_its_own_names(tmp_path: Path, name: str, replacing: bool) -> None:
    planted = _neighbours(tmp_path, name)
    if replacing:
        (tmp_path / name).write_bytes(b"earlier")
    before = snapshot(tmp_path)
    target = tmp_path / name

    atomic_write(target, lambda f: f.write(b"whole"))
    with pytest.raises(RuntimeError):
        atomic_write(target, lambda f: (f.write(b"half"), _fail()))
    grown = Output(target, overwrite=True)
    grown.file.write(b"grown")
    grown.commit()
    Output(target, overwrite=True).abort(discard=True)

    after = snapshot(tmp_path)
    assert after.pop(name) == b"grown"
    assert after == {k: v for k, v in before.items() if k != name}
    assert all((tmp_path / k).read_bytes() == v for k, v in planted.items())


def test_a_new_file_discarded_removes_only_itself(tmp_path: Path) -> None:
    planted = _neighbours(tmp_path, "a*.wav")
    out = Output(tmp_path / "a*.wav")
    out.file.write(b"no result")
    out.abort(discard=True)
    assert snapshot(tmp_path) == planted


def _fail() -> None:
    raise RuntimeError("the writer failed")

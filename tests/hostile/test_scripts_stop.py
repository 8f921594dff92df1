"""Every script stops what it started (issue 27): ``scripts/test.sh`` stops the private PipeWire
it started (four daemons) when it exits, whether pytest passed or failed, and leaves running an
instance it found running; so does the tests' ``virtual_audio`` fixture when its test session ends.

``test.sh`` runs here as written, in a copy of ``scripts/`` whose ``setup.sh`` and Python are
stand-ins (the real ones would install packages and run the whole suite); the fixture runs in a
pytest session of its own (one test, no plugins, no conftest). The PipeWire, WirePlumber,
pipewire-pulse and D-Bus daemons are the real ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.child import ROOT

DAEMONS = ("dbus", "pipewire", "wireplumber", "pipewire-pulse")
FAKE_PYTHON = """#!/usr/bin/env bash
# Stand-in for the venv's Python: lint and types pass; pytest records the daemons' pids.
if [[ "$1 $2" == "-m pytest" ]]; then
    cat "$DUPLEXCADENCE_AUDIO_DIR"/*.pid >"$RECORD"
    exit "$PYTEST_STATUS"
fi
[[ "$1" == "-m" ]] || exit 1  # -c 'import sounddevice': no PortAudio check
"""

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("pipewire", "wireplumber", "pipewire-pulse")),
    reason="needs PipeWire (scripts/setup.sh installs it)",
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the scripts ``test.sh`` runs, with stand-ins for setup and the venv's Python."""
    (tmp_path / "scripts").mkdir()
    for name in ("test.sh", "virtual_audio.sh"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    setup = tmp_path / "scripts" / "setup.sh"
    setup.write_text("#!/usr/bin/env bash\n")
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    for script in (setup, python):
        script.chmod(0o755)
    return tmp_path


@pytest.fixture
def audio_dir() -> Iterator[Path]:
    """A private runtime folder (short: socket paths are limited to 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="dc-hostile-"))
    yield folder
    subprocess.run(
        [ROOT / "scripts" / "virtual_audio.sh", "--stop"],
        env={**os.environ, "DUPLEXCADENCE_AUDIO_DIR": str(folder)},
        capture_output=True,
        timeout=30,
        check=False,
    )
    shutil.rmtree(folder, ignore_errors=True)


def _private_env(audio_dir: Path, record: Path) -> dict[str, str]:
    """This environment with no audio session of its own, pointed at ``audio_dir``; the daemons'
    pids go to ``record``."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PULSE_", "PIPEWIRE_"))},
        "DUPLEXCADENCE_AUDIO_DIR": str(audio_dir),
        "RECORD": str(record),
    }
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    return env


def _recorded(record: Path, stderr: str) -> list[int]:
    pids = [int(line) for line in record.read_text().split()]
    assert len(pids) == len(DAEMONS), (pids, stderr[-2000:])
    return pids


def _test_sh(tree: Path, audio_dir: Path, status: int) -> list[int]:
    """Run ``test.sh``; returns the pids of the daemons that ran while "pytest" ran."""
    record = tree / "pids"
    env = {
        **_private_env(audio_dir, record),
        "DUPLEXCADENCE_VENV": str(tree / "venv"),
        "PYTEST_STATUS": str(status),
    }
    done = subprocess.run(
        [tree / "scripts" / "test.sh"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == status, done.stderr[-2000:]
    return _recorded(record, done.stderr)


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie no init reaped has stopped


@pytest.mark.parametrize("status", [1])  # pytest failed: test.sh exits through set -e
def test_test_sh_stops_the_pipewire_it_started(tree: Path, audio_dir: Path, status: int) -> None:
    pids = _test_sh(tree, audio_dir, status)
    assert not [pid for pid in pids if _running(pid)]
    assert not list(audio_dir.glob("*.pid"))


def test_test_sh_leaves_an_instance_it_found_running(tree: Path, audio_dir: Path) -> None:
    env = {**os.environ, "DUPLEXCADENCE_AUDIO_DIR": str(audio_dir)}
    started = subprocess.run(
        [ROOT / "scripts" / "virtual_audio.sh"], env=env, capture_output=True, text=True, timeout=60
    )
    assert "DUPLEXCADENCE_AUDIO_STARTED=1" in started.stdout, started.stderr[-2000:]
    pids = _test_sh(tree, audio_dir, 0)
    assert all(_running(pid) for pid in pids)


INNER_TEST = """
import os
from pathlib import Path

from tests.audio_env import AudioEnv, virtual_audio  # noqa: F401 (the fixture)


def test_records_the_daemons(virtual_audio: AudioEnv) -> None:
    folder = Path(virtual_audio.exports["DUPLEXCADENCE_AUDIO_DIR"])
    pids = [path.read_text().strip() for path in sorted(folder.glob("*.pid"))]
    Path(os.environ["RECORD"]).write_text("\\n".join(pids))
"""


@pytest.mark.parametrize("found", [False, True], ids=["started", "found running"])
def test_the_audio_fixture_stops_only_the_pipewire_it_started(
    tmp_path: Path, audio_dir: Path, found: bool
) -> None:
    """A test session whose ``virtual_audio`` fixture started the private PipeWire leaves no
    daemon and no pid file once it ends; one it found running is left running."""
    record = tmp_path / "pids"
    env = {
        **_private_env(audio_dir, record),
        "PYTHONPATH": str(ROOT),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "DUPLEXCADENCE_AUDIO": "required",  # no device: the inner test fails, never skips
    }
    if found:
        started = subprocess.run(
            [ROOT / "scripts" / "virtual_audio.sh"], env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert "DUPLEXCADENCE_AUDIO_STARTED=1" in started.stdout, started.stderr[-2000:]
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    pids = _recorded(record, done.stdout)
    if found:
        assert all(_running(pid) for pid in pids)
    else:
        assert not [pid for pid in pids if _running(pid)]
        assert not list(audio_dir.glob("*.pid"))

"""Every script stops what it started (issue 27): ``scripts/test.sh`` stops the private PipeWire
it started (four daemons) when it exits, whether pytest passed or failed, and leaves running an
instance it found running.

``test.sh`` runs here as written, in a copy of ``scripts/`` whose ``setup.sh`` and Python are
stand-ins (the real ones would install packages and run the whole suite); the PipeWire, WirePlumber,
pipewire-pulse and D-Bus daemons are the real ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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


def _test_sh(tree: Path, audio_dir: Path, status: int) -> list[int]:
    """Run ``test.sh``; returns the pids of the daemons that ran while "pytest" ran."""
    record = tree / "pids"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PULSE_", "PIPEWIRE_"))},
        "DUPLEXCADENCE_AUDIO_DIR": str(audio_dir),
        "DUPLEXCADENCE_VENV": str(tree / "venv"),
        "RECORD": str(record),
        "PYTEST_STATUS": str(status),
    }
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    done = subprocess.run(
        [tree / "scripts" / "test.sh"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == status, done.stderr[-2000:]
    pids = [int(line) for line in record.read_text().split()]
    assert len(pids) == len(DAEMONS), (pids, done.stderr[-2000:])
    return pids


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

"""The virtual sound card for tests: ``scripts/virtual_audio.sh`` brought up on demand.

Use the ``virtual_audio`` fixture in a test marked ``audio``::

    from tests.audio_env import AudioEnv, virtual_audio  # noqa: F401  (the fixture)

    @pytest.mark.audio
    def test_realtime(virtual_audio: AudioEnv) -> None:
        subprocess.run([..., "--input-device", virtual_audio.input_device], env=virtual_audio.env)

It starts (or reuses) the private PipeWire instance with a null sink whose monitor is the
virtual microphone, points this process's PortAudio at it and re-enumerates devices; an
instance it started is stopped when the test session ends, one it reused is left running. Where no
virtual device can come up the test is skipped, unless ``DUPLEXCADENCE_AUDIO=required`` (CI,
after the device came up in ``scripts/test.sh``): then it fails, naming what went wrong.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.audio import AudioError, find_device, refresh_devices

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "virtual_audio.sh"
DEVICE = "pipewire"  # the ALSA PCM of pipewire-alsa: follows PIPEWIRE_RUNTIME_DIR, not the desktop


@dataclass(frozen=True)
class AudioEnv:
    """Where the virtual device lives: ``env`` for subprocesses, device names for the app."""

    env: dict[str, str]  # os.environ plus the script's exports
    exports: dict[str, str]  # only the script's exports
    input_device: str = DEVICE
    output_device: str = DEVICE


def audio_required() -> bool:
    """CI sets DUPLEXCADENCE_AUDIO=required once the device came up: skipping is then a bug."""
    return os.environ.get("DUPLEXCADENCE_AUDIO", "").lower() == "required"


def no_audio(reason: str) -> None:
    """Skip the test, or fail it where audio is required."""
    if audio_required():
        pytest.fail(f"DUPLEXCADENCE_AUDIO=required but {reason}", pytrace=False)
    pytest.skip(reason)


def start_virtual_audio(runtime_dir: Path | None = None, timeout: float = 60.0) -> dict[str, str]:
    """Run the script (idempotent) and return its exports; RuntimeError with its message."""
    env = dict(os.environ)
    if runtime_dir is not None:
        env["DUPLEXCADENCE_AUDIO_DIR"] = str(runtime_dir)
    try:
        done = subprocess.run(
            [str(SCRIPT)], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{SCRIPT.name} did not run: {exc}") from exc
    if done.returncode != 0:
        raise RuntimeError(f"{SCRIPT.name} failed: {done.stderr.strip()}")
    exports: dict[str, str] = {}
    for line in done.stdout.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            exports[key] = value
    if "PIPEWIRE_RUNTIME_DIR" not in exports:
        raise RuntimeError(f"{SCRIPT.name} printed no exports: {done.stdout!r}")
    return exports


def stop_virtual_audio(runtime_dir: Path) -> None:
    """Stop an instance started with ``start_virtual_audio(runtime_dir)``."""
    env = dict(os.environ, DUPLEXCADENCE_AUDIO_DIR=str(runtime_dir))
    subprocess.run([str(SCRIPT), "--stop"], env=env, capture_output=True, timeout=60, check=False)


def ensure_virtual_audio() -> AudioEnv:
    """Bring the device up and make this process's PortAudio see it; skip/fail when it cannot."""
    problem = ""
    try:
        exports = start_virtual_audio()
    except RuntimeError as exc:
        exports, problem = {}, f"no virtual audio device: {exc}"
    if exports:
        # Only what the ALSA plugin reads: the rest of this process keeps its own session.
        os.environ["PIPEWIRE_RUNTIME_DIR"] = exports["PIPEWIRE_RUNTIME_DIR"]
        refresh_devices()
        try:
            find_device(DEVICE, "input")
            find_device(DEVICE, "output")
        except AudioError as exc:
            problem = f"the virtual device is up but PortAudio does not see it: {exc}"
    if problem:
        no_audio(problem)
    return AudioEnv(env={**os.environ, **exports}, exports=exports)


def play_to_mic(wav: Path, audio: AudioEnv) -> subprocess.Popen[bytes]:
    """Start playing ``wav`` into the virtual sink, so the virtual microphone hears it (a user
    speaking); returns the running ``pw-play`` (wait() on it, or terminate() it). It mixes
    with whatever the app plays there: the sink's monitor carries both, like a room."""
    sink = audio.exports.get("DUPLEXCADENCE_AUDIO_SINK", "duplexcadence")
    return subprocess.Popen(
        ["pw-play", "--target", sink, str(wav)],
        env=audio.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# A process of its own naps 5 ms at a time, real-time where the machine allows it, until its
# stdin closes, then prints two numbers. The longest it overslept: a stall of the CPU it ran on
# (the sound server's threads there stop too), which our interpreter lock cannot cause. And the
# most time the host took from any one CPU within STOLEN_WINDOW_S (/proc/stat's steal column,
# where the kernel keeps it): a virtual machine's other CPU can stop while this one runs on, and
# a PortAudio or PipeWire thread stopped there misses its deadline just the same.
STOLEN_WINDOW_S = 0.2
_WATCH = f"""
import collections, os, select, sys, time
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except (AttributeError, OSError):
    pass
tick = os.sysconf("SC_CLK_TCK")
def steal():
    try:
        with open("/proc/stat") as f:
            rows = [r.split() for r in f if r[:3] == "cpu" and r[3].isdigit()]
    except OSError:
        return ()
    return tuple(int(r[8]) / tick if len(r) > 8 else 0.0 for r in rows)
slept, stolen, last = 0.0, 0.0, time.monotonic()
window = collections.deque([(last, steal())])
while not select.select([sys.stdin], [], [], 0.005)[0]:
    now, cpus = time.monotonic(), steal()
    slept, last = max(slept, now - last - 0.005), now
    while len(window) > 1 and now - window[1][0] >= {STOLEN_WINDOW_S}:
        window.popleft()
    if len(cpus) == len(window[0][1]):
        stolen = max([stolen] + [b - a for a, b in zip(window[0][1], cpus)])
    window.append((now, cpus))
print(slept, stolen)
"""


@dataclass
class Stall:
    """What :func:`machine_stalls` saw, in seconds: the longest its watcher overslept, and the
    most time the host took from any one CPU within ``STOLEN_WINDOW_S``."""

    slept: float = 0.0
    stolen: float = 0.0

    @property
    def seconds(self) -> float:
        """The longest any CPU of the machine was away."""
        return max(self.slept, self.stolen)

    def __str__(self) -> str:
        return f"overslept {self.slept * 1e3:.0f} ms, stolen {self.stolen * 1e3:.0f} ms"


@contextmanager
def machine_stalls() -> Iterator[Stall]:
    """Watch for stalls of the machine itself while the block runs (the :class:`Stall` is
    filled in once it ends): a real-time loopback glitches when a CPU stops for a hundred ms or
    more (a host that takes a virtual machine's CPU away), and that says nothing of our code."""
    watcher = subprocess.Popen(
        [sys.executable, "-c", _WATCH], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    stall = Stall()
    try:
        yield stall
    finally:
        out, _ = watcher.communicate("", timeout=10)
        slept, stolen = (float(x) for x in (out.split() or ["0", "0"]))
        stall.slept, stall.stolen = slept, stolen


@pytest.fixture(scope="session")
def virtual_audio() -> Iterator[AudioEnv]:
    """The virtual sound card (see the module doc). Stopped after the test session if this
    fixture started it (its four daemons would outlive pytest); one found running (started by
    ``scripts/test.sh`` or the user) is left running for whoever started it."""
    audio = ensure_virtual_audio()
    yield audio
    if audio.exports.get("DUPLEXCADENCE_AUDIO_STARTED") == "1":
        stop_virtual_audio(Path(audio.exports["DUPLEXCADENCE_AUDIO_DIR"]))

"""Audio devices as PortAudio (through ``sounddevice``) sees them, chosen by name.

PortAudio is imported lazily, so this package imports on machines without a sound card or
without the PortAudio library; what needs it raises :class:`AudioError` naming the fix.
Devices are matched by a case-insensitive name substring, optionally narrowed by a host API
substring ("ALSA", "JACK", "WASAPI"...); no name means the system default. PortAudio
enumerates devices once, when it starts: :func:`refresh_devices` restarts it to see devices
that appeared since (a virtual device started later, a headset plugged in), but only while
none of our streams is open, since restarting PortAudio would pull them from under us.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

Kind = Literal["input", "output"]

VIRTUAL_HINT = 'or start the virtual device: eval "$(scripts/virtual_audio.sh)"'


class AudioError(RuntimeError):
    """An audio device problem; the message names the fix."""


@dataclass(frozen=True)
class DeviceInfo:
    """One PortAudio device."""

    name: str
    host_api: str
    index: int
    max_input: int
    max_output: int
    default_rate: float

    def channels(self, kind: Kind) -> int:
        return self.max_input if kind == "input" else self.max_output

    def describe(self) -> str:
        return f"'{self.name}' ({self.host_api}, {self.default_rate:g} Hz)"


@dataclass
class AudioStats:
    """Counters of one stream, written by its callback and readable from any thread.

    overflows: input blocks lost (PortAudio's flag, or our ring full: the engine fell behind)
        or, for a sink, writes that did not fit the jitter buffer;
    underflows: PortAudio's underflow flag (the device starved before our callback ran);
    dry_events: times the playback jitter buffer ran dry mid-playback (faded out, no click);
    lost: the device vanished mid-session (reads give silence, writes are dropped; reopen());
    blocks: callbacks run; stalls: reads that timed out short; latency_s: PortAudio's estimate.
    """

    overflows: int = 0
    underflows: int = 0
    dry_events: int = 0
    device: str = ""
    host_api: str = ""
    rate: float = 0.0
    lost: bool = False
    blocks: int = 0
    stalls: int = 0
    latency_s: float = 0.0


_sd_module: ModuleType | None = None
_open_streams: set[int] = set()  # id() of our open streams: refresh_devices must not kill them
_lock = threading.Lock()


def portaudio() -> ModuleType:
    """The ``sounddevice`` module, imported on first use; AudioError naming the fix if absent."""
    global _sd_module
    if _sd_module is None:
        try:
            import sounddevice
        except OSError as exc:  # the wheel does not bundle PortAudio on Linux
            raise AudioError(
                f"PortAudio is not installed ({exc}): install libportaudio2 "
                "(sudo apt-get install libportaudio2), or run scripts/setup.sh"
            ) from exc
        except ImportError as exc:
            raise AudioError(
                f"sounddevice is not importable ({exc}): pip install sounddevice"
            ) from exc
        _sd_module = sounddevice
    return _sd_module


def list_devices() -> list[DeviceInfo]:
    """Every device PortAudio enumerated when it started (see :func:`refresh_devices`)."""
    sd = portaudio()
    apis = [str(api["name"]) for api in sd.query_hostapis()]
    return [_info(dict(dev), apis) for dev in sd.query_devices()]


def _info(dev: dict[str, Any], apis: Sequence[str]) -> DeviceInfo:
    return DeviceInfo(
        name=str(dev["name"]),
        host_api=apis[int(dev["hostapi"])],
        index=int(dev["index"]),
        max_input=int(dev["max_input_channels"]),
        max_output=int(dev["max_output_channels"]),
        default_rate=float(dev["default_samplerate"]),
    )


def refresh_devices() -> bool:
    """Re-enumerate devices (restart PortAudio); False, doing nothing, while a stream is open."""
    sd = portaudio()
    with _lock:
        if _open_streams:
            return False
        # sounddevice has no public re-scan: terminate/initialize is its documented way.
        sd._terminate()
        sd._initialize()
    return True


def register_stream(stream: object) -> None:
    with _lock:
        _open_streams.add(id(stream))


def unregister_stream(stream: object) -> None:
    with _lock:
        _open_streams.discard(id(stream))


def default_index(kind: Kind, host_api: str | None = None) -> int:
    """PortAudio's default device of ``kind`` (of ``host_api`` when given); -1 when none."""
    sd = portaudio()
    key = f"default_{kind}_device"
    if host_api is not None:
        for api in sd.query_hostapis():
            if host_api.lower() in str(api["name"]).lower():
                return int(api[key])
        return -1
    pair = sd.default.device
    return int(pair[0] if kind == "input" else pair[1])


def find_device(name: str | None, kind: Kind, host_api: str | None = None) -> DeviceInfo:
    """The device to open: see :func:`match_device`; the list comes from PortAudio."""
    return match_device(list_devices(), name, kind, host_api, default_index(kind, host_api))


def match_device(
    devices: Sequence[DeviceInfo],
    name: str | None,
    kind: Kind,
    host_api: str | None = None,
    default: int = -1,
) -> DeviceInfo:
    """Choose a device of ``kind`` by name substring and host API substring (case-insensitive).

    An exact name wins over substring matches; otherwise the first match in PortAudio's order.
    No name: the device at index ``default``. Raises AudioError naming the available devices
    and the fix when nothing fits.
    """
    usable = [d for d in devices if d.channels(kind) > 0]
    if host_api is not None:
        usable = [d for d in usable if host_api.lower() in d.host_api.lower()]
    flag = f"--{kind}-device"
    if not usable:
        where = f" on host API '{host_api}'" if host_api else ""
        apis = sorted({d.host_api for d in devices if d.channels(kind) > 0})
        also = f" (host APIs with {kind} devices: {', '.join(apis)})" if apis else ""
        raise AudioError(
            f"no audio {kind} device found{where}{also}: connect one, pass {flag} NAME, "
            f"{VIRTUAL_HINT}"
        )
    if name is None:
        for dev in usable:
            if dev.index == default:
                return dev
        return usable[0]  # the host API's default is not a device of this kind: take its first
    exact = [d for d in usable if d.name.lower() == name.lower()]
    found = exact or [d for d in usable if name.lower() in d.name.lower()]
    if found:
        return found[0]
    names = ", ".join(d.describe() for d in usable)
    raise AudioError(
        f"no {kind} device matches '{name}'"
        + (f" on host API '{host_api}'" if host_api else "")
        + f"; available {kind} devices: {names}. Pass {flag} with one of these names "
        f"(a part of the name is enough), or leave it out for the system default"
    )

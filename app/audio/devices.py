"""Audio devices as PortAudio (through ``sounddevice``) sees them, chosen by name.

PortAudio is imported lazily, so this package imports on machines without a sound card or
without the PortAudio library; what needs it raises :class:`AudioError` naming the fix.
Devices are matched by a case-insensitive name substring, optionally narrowed by a host API
substring ("ALSA", "JACK", "WASAPI"...); no name means the system default. PortAudio
enumerates devices once, when it starts: :func:`refresh_devices` restarts it to see devices
that appeared since (a virtual device started later, a headset plugged in), but only while
none of our streams is open, since restarting PortAudio would pull them from under us.

PortAudio calls that wait for a device's thread are never waited on without a bound: streams
close through :func:`close_stream` (a watchdog abandons a close that does not return) and
PortAudio is terminated at exit by :func:`_exit_portaudio`, not by sounddevice's own handler.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from app.audio.cstderr import capture_c_stderr

Kind = Literal["input", "output"]

VIRTUAL_HINT = 'or start the virtual device: eval "$(scripts/virtual_audio.sh)"'
CLOSE_WAIT_S = 2.0  # longest anyone waits for PortAudio to close a stream, or to terminate

log = logging.getLogger("duplexcadence.audio")


class AudioError(RuntimeError):
    """An audio device problem; the message names the fix."""


class DeviceLost(AudioError):
    """A device stopped mid-conversation (unplugged, or its sound server stopped): the
    conversation ends with this one line, which names the device and the fix."""


_WHAT = {"input": "microphone", "output": "speaker"}


def lost_line(kind: Kind, device: str) -> str:
    """The line that ends a conversation whose ``kind`` device ``device`` stopped."""
    return (
        f"the {_WHAT[kind]} {device} stopped (unplugged, or its sound server stopped): "
        "reconnect it or restart the sound server, then start the conversation again"
    )


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
    blocks: callbacks run; stalls: reads that timed out short; latency_s: PortAudio's estimate;
    abandoned: closes that did not return within ``CLOSE_WAIT_S`` (see :func:`close_stream`);
    timestamps: PortAudio gives the callbacks ADC (input) or DAC (output) times (some hosts
        give 0.0: then echo alignment and response latency fall back to queue estimates).
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
    abandoned: int = 0
    timestamps: bool = False


_sd_module: ModuleType | None = None
_open_streams: dict[int, Any] = {}  # our open streams by id(): refresh_devices must not kill them
_closing: set[int] = set()  # id() of those whose close has not returned (yet, or ever)
_lock = threading.Lock()


def portaudio() -> ModuleType:
    """The ``sounddevice`` module, imported on first use; AudioError naming the fix if absent."""
    global _sd_module
    if _sd_module is None:
        capture_c_stderr()  # PortAudio's own lines, rate-limited (a dead stream prints in a loop)
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
        # Ours instead: sounddevice's handler calls Pa_Terminate with no bound (see close_stream).
        atexit.unregister(sounddevice._exit_handler)
        atexit.register(_exit_portaudio)
        if hasattr(os, "RTLD_NODELETE"):
            # Never unmapped: cffi unloads the library as Python finalizes, and a PortAudio
            # thread that would not stop (see close_stream) then runs into freed code.
            ctypes.CDLL(sounddevice._libname, mode=os.RTLD_NOLOAD | os.RTLD_NODELETE)
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
    """Re-enumerate devices (restart PortAudio); False, doing nothing, while a stream is open.

    A stream whose close was abandoned (:func:`close_stream`) stays open for the life of the
    process, so devices plugged in after such a loss show only once the app restarts; the
    ``pipewire`` and ``default`` devices, which follow the sound server, need no re-scan.
    """
    sd = portaudio()
    with _lock:
        if _open_streams:
            return False
        # sounddevice has no public re-scan: terminate/initialize is its documented way.
        sd._terminate()
        sd._initialize()
    return True


def register_stream(stream: Any) -> None:
    with _lock:
        _open_streams[id(stream)] = stream


def close_stream(stream: Any, what: str, on_abandoned: Callable[[], None]) -> threading.Thread:
    """Abort and close ``stream`` on a daemon thread under a watchdog; returns the watchdog.

    Why: once a stream's sound server is gone (a USB headset pulled, PipeWire killed), PortAudio
    19.6's ALSA callback thread can spin forever with cancellation disabled, and
    Pa_AbortStream, Pa_CloseStream and Pa_Terminate all join that thread without a timeout:
    they never return. So nobody waits on the close itself: the watchdog waits
    ``CLOSE_WAIT_S``, then abandons it, logs one line naming ``what`` and calls
    ``on_abandoned`` (a counter). An abandoned stream stays registered, so neither
    :func:`refresh_devices` nor the exit handler terminates PortAudio under it. Joining the
    watchdog waits at most ``CLOSE_WAIT_S``; the engine thread does not join it at all.
    """
    with _lock:
        _closing.add(id(stream))
    closer = threading.Thread(target=_close_quietly, args=(stream,), daemon=True)

    def watch() -> None:
        closer.join(CLOSE_WAIT_S)
        if closer.is_alive():
            log.warning(
                "audio: the %s did not close within %g s (its sound server is gone); it is "
                "left to the operating system",
                what,
                CLOSE_WAIT_S,
            )
            on_abandoned()

    watchdog = threading.Thread(target=watch, daemon=True)
    closer.start()
    watchdog.start()
    return watchdog


def _close_quietly(stream: Any) -> None:
    """Abort and close a stream, whatever state its device is in; unregister it once closed."""
    try:
        stream.abort()
        stream.close()
    except Exception:  # a vanished device can fail to close; it is gone either way
        pass
    with _lock:
        _open_streams.pop(id(stream), None)
        _closing.discard(id(stream))


def _exit_portaudio() -> None:
    """At interpreter exit, in place of sounddevice's handler: close the streams still open
    (each through :func:`close_stream`, together within ``CLOSE_WAIT_S``: a running callback
    would call into a finalized interpreter), then terminate PortAudio within the same bound,
    and not at all while a close is in flight or abandoned (Pa_Terminate would join the
    spinning thread). What is left, the operating system releases as the process ends."""
    sd = _sd_module
    if sd is None:
        return
    with _lock:
        still_open = [s for key, s in _open_streams.items() if key not in _closing]
    for watchdog in [close_stream(s, "stream still open at exit", _ignore) for s in still_open]:
        watchdog.join()
    with _lock:
        if _closing:
            return
    ender = threading.Thread(target=sd._exit_handler, daemon=True)
    ender.start()
    ender.join(CLOSE_WAIT_S)
    if ender.is_alive():
        log.warning("audio: PortAudio did not end within %g s; exiting without it", CLOSE_WAIT_S)


def _ignore() -> None:
    """An abandoned close at exit: nothing is left to count it."""


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

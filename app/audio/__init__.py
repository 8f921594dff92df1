"""Real-time audio for the conversation loop, no Qt: microphone periods in, speech out.

``DeviceSource`` (a PeriodSource at 16 kHz) and ``DeviceSink`` (a PeriodSink at 24 kHz) run
PortAudio streams at the device's own rate, with callbacks that only copy into preallocated
rings and count; ``soxr`` streams convert rates on the engine thread. Devices are chosen by
name and host API (:func:`list_devices`, :func:`find_device`); every failure is an
:class:`AudioError` that names the fix. Importing this package needs no sound card and no
PortAudio library: PortAudio is loaded when a device is first used.
"""

from app.audio.devices import (
    AudioError,
    AudioStats,
    DeviceInfo,
    DeviceLost,
    find_device,
    list_devices,
    match_device,
    refresh_devices,
)
from app.audio.echo import (
    HEADPHONES_HINT,
    EchoCanceller,
    canceller_rate,
    check_echo_cancel,
    echo_available,
)
from app.audio.jitter import JitterBuffer
from app.audio.rings import SILENCE_DBFS, Ring, peak_dbfs
from app.audio.sink import DeviceSink
from app.audio.source import DeviceSource, cancel_playback_echo

__all__ = [
    "HEADPHONES_HINT",
    "SILENCE_DBFS",
    "AudioError",
    "AudioStats",
    "DeviceInfo",
    "DeviceLost",
    "DeviceSink",
    "DeviceSource",
    "EchoCanceller",
    "JitterBuffer",
    "Ring",
    "cancel_playback_echo",
    "canceller_rate",
    "check_echo_cancel",
    "echo_available",
    "find_device",
    "list_devices",
    "match_device",
    "peak_dbfs",
    "refresh_devices",
]

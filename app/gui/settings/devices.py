"""Audio device choices for the settings dialog, from ``app.audio.list_devices``.

A machine without audio devices, or without the PortAudio library, still opens the dialog: the
lists then hold only "System default" and the reason shows under them.
"""

from __future__ import annotations

import ctypes.util
import sys
from dataclasses import dataclass
from pathlib import Path

from app.audio.devices import list_devices

__all__ = ["DeviceChoice", "cuda_present", "device_choices"]


@dataclass(frozen=True)
class DeviceChoice:
    """One entry of a device list; ``name`` None is the system default."""

    label: str
    name: str | None
    host_api: str | None


DEFAULT = DeviceChoice("System default", None, None)


def device_choices() -> tuple[list[DeviceChoice], list[DeviceChoice], str | None]:
    """(inputs, outputs, problem): each list starts with the system default."""
    inputs, outputs = [DEFAULT], [DEFAULT]
    try:
        devices = list_devices()
    except Exception as exc:  # no PortAudio, or it failed: say so, keep the dialog usable
        return inputs, outputs, f"Audio devices unavailable ({exc}): the system default is used."
    for d in devices:
        choice = DeviceChoice(f"{d.name}  ·  {d.host_api}", d.name, d.host_api)
        if d.max_input > 0:
            inputs.append(choice)
        if d.max_output > 0:
            outputs.append(choice)
    problem = None
    if len(inputs) == 1 and len(outputs) == 1:
        problem = (
            "No audio devices found: connect one, or play a recording to the model instead "
            "(File > Use a WAV file as the microphone)."
        )
    return inputs, outputs, problem


def cuda_present() -> bool:
    """Whether this machine has an NVIDIA GPU driver, asked without torch (the GUI thread never
    imports it): on Linux the driver lists its GPUs under /proc; elsewhere its library exists.
    A yes here can still fail later (no CUDA build of torch): the settings check says so."""
    if sys.platform.startswith("linux"):
        gpus = Path("/proc/driver/nvidia/gpus")
        return gpus.is_dir() and any(gpus.iterdir())
    return ctypes.util.find_library("nvcuda" if sys.platform == "win32" else "cuda") is not None

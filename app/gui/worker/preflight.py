"""Check what a conversation needs before the model loads, and say what is wrong in the
window's words (Settings and menu names, never a command-line flag or an exception's class).

Runs on the engine thread at the start of every session (PortAudio and the settings check may
take a moment): a missing microphone is then reported in a second, not after a model load.
The same wording serves devices that fail to open after the build (:func:`device_problem`).
"""

from __future__ import annotations

from pathlib import Path

from app.audio.devices import AudioError, Kind, find_device
from app.settings import Settings, SettingsError, check_settings

__all__ = ["StartError", "check_before_loading", "device_error", "device_problem"]

_WHERE = {"input": "microphone", "output": "speaker"}
_USE_WAV = "File > Use a WAV file as the microphone"


class StartError(RuntimeError):
    """A conversation that cannot start; the message names the fix in the window's words."""


def device_problem(kind: Kind, name: str | None, reason: str = "") -> str:
    """The message for a ``kind`` device that cannot be found or opened."""
    what = _WHERE[kind]
    device = f"the {what} '{name}'" if name else f"a default {what}"
    fix = "connect one or choose another in Settings > Audio"
    if kind == "input":
        fix += f", or play a recording instead ({_USE_WAV})"
    because = f" ({reason})" if reason else ""
    return f"Cannot use {device}{because}: {fix}."


def device_error(kind: Kind, name: str | None, error: AudioError) -> StartError:
    """``error`` (worded for the terminal) as a :class:`StartError` in the window's words."""
    return StartError(device_problem(kind, name, _reason(error)))


def _reason(error: AudioError) -> str:
    """The part of an audio error that says what happened, without its terminal advice."""
    text = str(error)
    for cut in (": connect one", "; available", ". Close the program", ". Pass", ", pass"):
        text = text.split(cut)[0]
    return text.strip().rstrip(".")


def _check_device(kind: Kind, name: str | None, host_api: str | None) -> None:
    try:
        find_device(name, kind, host_api)
    except AudioError as error:
        raise device_error(kind, name, error) from None


def check_before_loading(settings: Settings, input_wav: Path | None, speaker: bool) -> None:
    """Raise :class:`StartError` naming the fix when the settings or the audio route cannot
    work: a checkpoint that is missing or damaged, no such microphone or speaker (``speaker``:
    the route plays on the output device), an unreadable WAV (``input_wav``: the microphone)."""
    try:
        check_settings(settings)
    except SettingsError as error:
        raise StartError(f"Settings: {error}.") from None
    if input_wav is not None:
        _check_wav(input_wav)
    else:
        _check_device("input", settings.input_device, settings.host_api)
    if speaker:
        _check_device("output", settings.output_device, settings.host_api)


def _check_wav(path: Path) -> None:
    import soundfile

    try:
        soundfile.info(str(path))
    except Exception as error:  # soundfile raises its own kinds for missing and unreadable
        what = "does not exist" if not path.exists() else f"cannot be read ({error})"
        raise StartError(
            f"The recording {path} {what}: choose another ({_USE_WAV}) or use the microphone "
            "(File > Use the microphone device)."
        ) from None

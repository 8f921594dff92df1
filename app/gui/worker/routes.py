"""Where a conversation's audio comes from and goes to: devices, or a WAV file and nowhere.

Opened and closed on the engine thread (docs/architecture.md: it owns the session's I/O).
Devices come from ``app.audio`` (chosen by name and host API, as the settings remember them); a
WAV input goes through ``app.periods.WavSource`` — what the tests, the screenshot and the demo
use, and the way to converse on a machine without a microphone.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from app.gui.worker.levels import AttributeLevel, EnvelopeLevel, LevelReader
from app.gui.worker.preflight import device_error
from app.periods import PeriodSink, PeriodSource, WavSource
from app.settings import Settings

__all__ = ["AudioRoute", "NullSink", "OpenedAudio", "open_audio"]


@dataclass(frozen=True)
class AudioRoute:
    """The session's audio path.

    ``input_wav``: feed this file as the microphone (None: the input device in the settings);
    ``realtime``: pace the file to the wall clock (False runs as fast as the model steps);
    ``output``: ``"device"`` plays through the output device, ``"none"`` only records.
    """

    input_wav: Path | None = None
    realtime: bool = True
    output: str = "device"

    def __post_init__(self) -> None:
        if self.output not in ("device", "none"):
            raise ValueError(f"output={self.output!r}: pass 'device' or 'none'")


class NullSink:
    """Accepts periods and drops them (the recorder keeps the assistant channel for export)."""

    def write(self, pcm: np.ndarray) -> None:
        del pcm


@dataclass
class OpenedAudio:
    """An open source and sink with a level reader for each meter.

    A device measures its own level; a file or the null sink has an envelope instead, which
    the engine thread feeds each period's samples (``feed_levels``).
    """

    source: PeriodSource
    sink: PeriodSink
    input_label: str
    output_label: str
    input_level: LevelReader
    output_level: LevelReader
    input_envelope: EnvelopeLevel | None = None
    output_envelope: EnvelopeLevel | None = None

    def feed_levels(self, mic: np.ndarray, pcm: np.ndarray) -> None:
        """Feed the envelopes of the ends that do not measure themselves (engine thread)."""
        if self.input_envelope is not None:
            self.input_envelope.feed(mic)
        if self.output_envelope is not None:
            self.output_envelope.feed(pcm)

    def interrupt(self) -> None:
        """Barge-in: a device sink drops its queued audio, fading out (others have none)."""
        interrupt = getattr(self.sink, "interrupt", None)
        if interrupt is not None:
            interrupt()

    def close(self) -> None:
        """Close both ends, sink first (it may still be draining); never raises."""
        _close_quietly(self.sink, self.source)


def _close_quietly(*ends: object) -> None:
    """Close what has a ``close`` (devices; a WAV source has nothing to close), in order."""
    for end in ends:
        close = getattr(end, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()


_End = TypeVar("_End")
_Opened = tuple[_End, str, LevelReader | None]  # the end, its label, its own meter if it has one


def _open_input(route: AudioRoute, settings: Settings, rate: int) -> _Opened[PeriodSource]:
    if route.input_wav is not None:
        if not Path(route.input_wav).is_file():
            raise FileNotFoundError(
                f"the recording {route.input_wav} does not exist: choose another "
                "(File > Use a WAV file as the microphone)"
            )
        return WavSource(route.input_wav, rate, realtime=route.realtime), route.input_wav.name, None
    from app.audio import AudioError, DeviceSource

    source = DeviceSource(settings.input_device, rate=rate, host_api=settings.host_api)
    try:
        source.start()
    except AudioError as error:
        raise device_error("input", settings.input_device, error) from None
    return source, settings.input_device or "system default", AttributeLevel(source)


def _open_output(route: AudioRoute, settings: Settings, rate: int) -> _Opened[PeriodSink]:
    if route.output == "none":
        return NullSink(), "recorded only", None
    from app.audio import AudioError, DeviceSink

    sink = DeviceSink(settings.output_device, rate=rate, host_api=settings.host_api)
    try:
        sink.start()
    except AudioError as error:
        raise device_error("output", settings.output_device, error) from None
    return sink, settings.output_device or "system default", AttributeLevel(sink)


def open_audio(
    route: AudioRoute, settings: Settings, input_rate: int, output_rate: int
) -> OpenedAudio:
    """Open the route's source and sink (engine thread); a failure closes what was opened."""
    source, in_label, in_level = _open_input(route, settings, input_rate)
    try:
        sink, out_label, out_level = _open_output(route, settings, output_rate)
    except BaseException:
        _close_quietly(source)
        raise
    if settings.echo_cancel:
        from app.audio import cancel_playback_echo

        try:
            cancel_playback_echo(source, sink)
        except BaseException:
            _close_quietly(sink, source)
            raise
    in_level, in_envelope = _meter(in_level, input_rate)
    out_level, out_envelope = _meter(out_level, output_rate)
    return OpenedAudio(
        source, sink, in_label, out_label, in_level, out_level, in_envelope, out_envelope
    )


def _meter(own: LevelReader | None, rate: int) -> tuple[LevelReader, EnvelopeLevel | None]:
    """An end's own level reader, else a new envelope to feed (returned twice: read and fed)."""
    if own is not None:
        return own, None
    envelope = EnvelopeLevel(rate)
    return envelope, envelope

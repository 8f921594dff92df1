"""Where a conversation's audio comes from and goes to: devices, or a WAV file and nowhere.

Opened and closed on the engine thread (DESIGN.md: it owns the session's I/O). Devices come from
``app.audio`` (chosen by name and host API, as the settings remember them); a WAV input goes
through ``app.periods.WavSource`` — what the tests, the screenshot and the demo use, and the
way to converse on a machine without a microphone.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from app.gui.engine.levels import AttributeLevel, EnvelopeLevel, LevelReader

__all__ = ["AudioRoute", "NullSink", "OpenedAudio", "open_audio"]


class _Source(Protocol):
    def read_period(self, samples: int, timeout: float | None = None) -> np.ndarray | None: ...


class _Sink(Protocol):
    def write(self, pcm: np.ndarray) -> None: ...


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
    """An open source and sink with a level reader for each meter."""

    source: _Source
    sink: _Sink
    input_label: str
    output_label: str
    input_level: LevelReader
    output_level: LevelReader
    _envelopes: list[tuple[str, EnvelopeLevel]] = field(default_factory=list)

    def feed_levels(self, mic: np.ndarray, pcm: np.ndarray) -> None:
        """Give file/null routes their meter envelopes (device routes measure themselves)."""
        for channel, envelope in self._envelopes:
            envelope.feed(mic if channel == "input" else pcm)

    def interrupt(self) -> None:
        """Barge-in: a device sink drops its queued audio, fading out (others have none)."""
        interrupt = getattr(self.sink, "interrupt", None)
        if interrupt is not None:
            interrupt()

    def close(self) -> None:
        """Close both ends, sink first (it may still be draining); never raises."""
        for end in (self.sink, self.source):
            close = getattr(end, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()


def _start(end: Any) -> None:
    start = getattr(end, "start", None)
    if start is not None:
        start()


def _open_input(route: AudioRoute, settings: Any, rate: int) -> tuple[Any, str, LevelReader | None]:
    if route.input_wav is not None:
        from app.periods import WavSource

        if not Path(route.input_wav).is_file():
            raise FileNotFoundError(f"input WAV {route.input_wav} does not exist: pass a .wav file")
        return WavSource(route.input_wav, rate, realtime=route.realtime), route.input_wav.name, None
    from app.audio import DeviceSource

    source = DeviceSource(settings.input_device, rate=rate, host_api=settings.host_api)
    _start(source)
    return source, settings.input_device or "system default", AttributeLevel(source)


def _open_output(
    route: AudioRoute, settings: Any, rate: int
) -> tuple[Any, str, LevelReader | None]:
    if route.output == "none":
        return NullSink(), "recorded only", None
    from app.audio import DeviceSink

    sink = DeviceSink(settings.output_device, rate=rate, host_api=settings.host_api)
    _start(sink)
    return sink, settings.output_device or "system default", AttributeLevel(sink)


def open_audio(route: AudioRoute, settings: Any, input_rate: int, output_rate: int) -> OpenedAudio:
    """Open the route's source and sink (engine thread); a failure closes what was opened."""
    source, in_label, in_level = _open_input(route, settings, input_rate)
    try:
        sink, out_label, out_level = _open_output(route, settings, output_rate)
    except BaseException:
        with contextlib.suppress(Exception):
            getattr(source, "close", lambda: None)()
        raise
    if settings.echo_cancel and hasattr(source, "enable_echo_cancel") and out_level is not None:
        try:  # both ends are devices: cancel our own playback from the microphone
            source.enable_echo_cancel(sink)
        except BaseException:
            OpenedAudio(source, sink, in_label, out_label, out_level, out_level).close()
            raise
    envelopes: list[tuple[str, EnvelopeLevel]] = []
    if in_level is None:
        envelopes.append(("input", EnvelopeLevel(input_rate)))
        in_level = envelopes[-1][1]
    if out_level is None:
        envelopes.append(("output", EnvelopeLevel(output_rate)))
        out_level = envelopes[-1][1]
    return OpenedAudio(source, sink, in_label, out_label, in_level, out_level, envelopes)

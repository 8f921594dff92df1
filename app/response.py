"""Response latency: from the end of the user's speech to the assistant's first sound. No Qt.

The end of speech is the ADC time of the last loud 20-ms block the model heard (PortAudio's
``inputBufferAdcTime``, through the source's period :class:`~app.audio.marks.Timeline`); the
first sound is the DAC time of the first loud block of the answer (the sink's callback marks
each block it plays with ``outputBufferDacTime``: :meth:`~app.audio.sink.DeviceSink.dac_time`).
Both are on the stream clock, so their gap is what a listener in the room hears, whatever the
queues, the resampling and the engine's lateness in between. The DAC time is known only once
the callback has played the sample, so a response is reported at a later period than the one
that wrote it (:meth:`ResponseMeter.poll`, before each step: the trace's ``response_ms``).

Where a host gives no times (0.0), or an end is a file, both ends are estimated from the
queues on the monotonic clock, as before: the period's last sample was captured
``captured_ago_s`` before it was read, and a sample written now plays ``ahead_s`` later (said
once in the log when both ends are devices).

:class:`ResponseClock` does the counting: the clock arms at the end of each stretch of speech
and reports the gap to the first sound after it, once; sound that starts while the user still
talks is no response (the assistant carrying on, or talking over the user).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from app.periods import PeriodSink, PeriodSource

__all__ = ["ResponseClock", "ResponseMeter", "response_facts"]

log = logging.getLogger("duplexcadence.audio")

OWN_TAIL_S = 0.5  # after the assistant's sound reached the DAC, its room echo may still come back

Located = Callable[[int], float | None]  # a sample's time once known (None: not yet; NaN: never)


def _loud(samples: np.ndarray, rate: int, block_s: float, threshold: float) -> np.ndarray:
    """Per ``block_s`` block of ``samples``: whether its peak is above ``threshold``."""
    flat = np.asarray(samples, dtype=np.float32).reshape(-1)
    block = max(1, round(rate * block_s))
    usable = flat.size - flat.size % block
    if usable == 0:
        return np.zeros(0, dtype=bool)
    return np.asarray(np.abs(flat[:usable].reshape(-1, block)).max(axis=1) > threshold)


class _Run:
    """One stretch of the assistant's sound: where it starts and (once written) where it stops,
    resolved to converter times as they become known, and kept once known."""

    def __init__(self, at: Located, start: int) -> None:
        self.start: tuple[Located, int] = (at, start)
        self.stop: tuple[Located, int] | None = None
        self._began: float | None = None
        self._ended: float | None = None

    def span(self) -> tuple[float, float] | None:
        """(first sound, last sound + ``OWN_TAIL_S``), the end infinite while it plays; None
        while it has not played, or never will (flushed)."""
        if self._began is None:
            self._began = self.start[0](self.start[1])
        began = self._began
        if began is None or math.isnan(began):
            return None
        if self._ended is None and self.stop is not None:
            self._ended = self.stop[0](self.stop[1])
        ended = self._ended
        if ended is None:
            return began, math.inf
        if math.isnan(ended):  # cut off by a barge-in: the user spoke over it
            return began, began
        return began, ended + OWN_TAIL_S


class ResponseClock:
    """Speech heard and sound played, each with where its samples sit in time (module doc)."""

    def __init__(
        self, mic_rate: int, out_rate: int, threshold_db: float = -45.0, block_s: float = 0.02
    ) -> None:
        self.mic_rate, self.out_rate, self.block_s = mic_rate, out_rate, block_s
        self.threshold = float(10 ** (threshold_db / 20))
        self._speech_end: float | None = None  # the clock's seconds; None: no speech waits
        self._sounding = False  # the last played block was loud
        self._onsets: deque[tuple[Located, int]] = deque()  # sounds written since the speech
        # The assistant's stretches of sound: where each starts and (once written) ends.
        self._runs: deque[_Run] = deque(maxlen=64)
        self.own = 0  # loud blocks heard while the assistant's sound was in the room

    def heard(self, samples: np.ndarray, at: Callable[[float], float]) -> None:
        """What the model heard; ``at(k)``: when its sample ``k`` was captured. A loud block
        captured while the assistant's own sound played, or within ``OWN_TAIL_S`` after it, is
        its echo (what echo cancellation left), not the user's speech."""
        loud = np.flatnonzero(_loud(samples, self.mic_rate, self.block_s, self.threshold))
        block = round(self.mic_rate * self.block_s)
        if not loud.size:
            return
        live = self._live(at(0.0))
        for k in loud[::-1]:
            end = at(float((int(k) + 1) * block))
            if any(start <= end and at(float(int(k) * block)) <= stop for start, stop in live):
                self.own += 1
                continue
            self._speech_end = end
            return

    def _live(self, since: float) -> list[tuple[float, float]]:
        """The spans in which the assistant's sound (and its tail) reached the microphone, as far
        as known (a stretch not played yet is in the future; one playing has no end yet);
        stretches over before ``since`` are forgotten."""
        spans = []
        for run in list(self._runs):
            span = run.span()
            if span is not None and span[1] < since:
                self._runs.remove(run)
            elif span is not None:
                spans.append(span)
        return spans

    def played(self, samples: np.ndarray, at: Located) -> None:
        """What is written to play; ``at(k)``: when its sample ``k`` reaches the converter."""
        sound = _loud(samples, self.out_rate, self.block_s, self.threshold)
        if not sound.size:
            return
        before = np.concatenate(([self._sounding], sound[:-1]))
        self._sounding = bool(sound[-1])
        block = round(self.out_rate * self.block_s)
        changes = np.flatnonzero(sound != before)
        for k in changes:
            if sound[k]:
                self._runs.append(_Run(at, int(k) * block))
            elif self._runs:
                self._runs[-1].stop = (at, int(k) * block)
        if self._speech_end is None:
            return
        self._onsets.extend((at, int(k) * block) for k in np.flatnonzero(sound & ~before))

    def poll(self) -> float | None:
        """The latency in seconds once the first sound after the speech has played, once."""
        while self._onsets:
            at, k = self._onsets[0]
            t = at(k)
            if t is None:  # not played yet: nor is any sound written after it
                return None
            self._onsets.popleft()
            end = self._speech_end
            if end is None or math.isnan(t) or t < end:  # never played, or over the speech
                continue
            self._speech_end = None
            self._onsets.clear()
            return t - end
        return None


class ResponseMeter:
    """A session's response latency on its source and sink (module doc). Per period, on the
    engine thread: :meth:`heard` right after the read, :meth:`poll` before the step (a response
    whose first sound has played by now), :meth:`played` right before the write."""

    def __init__(self, source: PeriodSource, sink: PeriodSink, mic_rate: int, out_rate: int):
        from app.audio import DeviceSink, DeviceSource

        self.clock = ResponseClock(mic_rate, out_rate)
        self._source = source if isinstance(source, DeviceSource) else None
        self._sink = sink if isinstance(sink, DeviceSink) else None
        self.by: str | None = None  # "timestamps" or "queues", chosen at the first period

    def heard(self, samples: np.ndarray) -> None:
        read_at = time.monotonic()
        source = self._source
        timeline = source.timeline if source is not None else None
        if self.by is None:
            self.by = self._choose(timeline is not None)
        if self.by == "timestamps":  # a period without times is not timed on another clock
            if timeline is not None:
                self.clock.heard(samples, timeline.at)
            return
        rate = self.clock.mic_rate
        ago = source.captured_ago_s if source is not None else 0.0
        first = read_at - ago - len(samples) / rate
        self.clock.heard(samples, lambda k: first + k / rate)

    def played(self, samples: np.ndarray) -> None:
        sink = self._sink
        if self.by == "timestamps" and sink is not None:
            start = sink.position
            self.clock.played(samples, lambda k: sink.dac_time(start + k))
            return
        first = time.monotonic() + (sink.ahead_s if sink is not None else 0.0)
        rate = self.clock.out_rate
        self.clock.played(samples, lambda k: first + k / rate)

    def poll(self) -> float | None:
        """The latency in seconds of a response whose first sound has played since."""
        return self.clock.poll()

    def _choose(self, heard_times: bool) -> str:
        if self._source is None or self._sink is None:  # a file: only the queues' estimate
            return "queues"
        if heard_times and self._sink.stats.timestamps:
            return "timestamps"
        log.warning(
            "response latency: PortAudio gives no ADC or DAC times on this host (0.0); "
            "estimated from the queues instead"
        )
        return "queues"


def response_facts(response_s: float | None, by: str | None) -> dict[str, Any]:
    """The period record's fields for a response measured in it (none: no fields): the trace's
    ``response_ms`` and how it was timed (``response_by``: "timestamps" or "queues")."""
    if response_s is None:
        return {}
    return {"response_ms": round(response_s * 1e3, 1), "response_by": by or "queues"}

"""When samples met the converters: PortAudio's ADC and DAC times, from the callback to the engine.

A PortAudio callback is handed, beside its block, the time its first sample hit the ADC
(``time.inputBufferAdcTime``, input) or will reach the DAC (``time.outputBufferDacTime``,
output), on the stream's clock (all streams of one host API share it: on Linux/ALSA the
monotonic clock). Some hosts give 0.0: no time is known there.

:class:`Marks` carries those times out of the callback: one ``(index, time, count)`` mark per
block, ``index`` the position of the block's first sample in the stream the samples go to (a
:class:`~app.audio.rings.Ring`'s write or read counter), ``count`` its samples. Preallocated,
single producer and single consumer like the ring (the producer only advances the put counter
after its copy), so the callback never allocates or waits. A sample's time is then its block's
time plus its place in the block: an xrun (a block lost, late or repeated) shows as a jump
between two marks, never as a shift of the samples after it.

:class:`Timeline` is the engine side's answer for a run of samples (a microphone period): where
each block of it starts and when that block was captured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Marks", "Timeline", "time_at"]


class Marks:
    """Single-producer single-consumer ring of ``(index, time, count)`` marks (module doc)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"marks capacity {capacity}: give at least one")
        self._index = np.zeros(capacity, dtype=np.float64)
        self._time = np.zeros(capacity, dtype=np.float64)
        self._count = np.zeros(capacity, dtype=np.float64)
        self._cap = capacity
        self._put = 0  # producer only
        self._taken = 0  # consumer only
        self.lost = 0  # marks that did not fit (producer only): the consumer fell that far behind

    def put(self, index: float, time: float, count: float) -> None:
        """Record a block (producer; never allocates). A full ring drops the mark, counted."""
        if self._put - self._taken >= self._cap:
            self.lost += 1
            return
        k = self._put % self._cap
        self._index[k], self._time[k], self._count[k] = index, time, count
        self._put += 1  # publish only after the copy

    def take(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every mark put since the last take: ``(index, time, count)`` arrays (consumer)."""
        first, last = self._taken, self._put
        slots = np.arange(first, last) % self._cap
        taken = self._index[slots], self._time[slots], self._count[slots]
        self._taken = last  # release only after the copy
        return taken


def time_at(position: float, index: np.ndarray, time: np.ndarray, rate: float) -> float:
    """The time of the sample at ``position`` from marks sorted by ``index`` (the last mark at or
    before it, plus the samples since at ``rate``; before the first mark, counted back)."""
    j = max(0, int(np.searchsorted(index, position, side="right")) - 1)
    return float(time[j] + (position - index[j]) / rate)


@dataclass(frozen=True)
class Timeline:
    """When each block of a run of samples was captured: ``offsets`` (samples from the run's
    start, ascending, the first 0) and ``times`` (the ADC time of the sample at each offset), at
    ``rate``. Between two offsets the samples are consecutive."""

    offsets: np.ndarray
    times: np.ndarray
    rate: float

    def at(self, sample: float) -> float:
        """The ADC time of the run's sample ``sample`` (fractions allowed)."""
        return time_at(sample, self.offsets, self.times, self.rate)

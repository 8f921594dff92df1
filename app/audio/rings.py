"""Preallocated sample rings between a PortAudio callback and the engine thread.

A :class:`Ring` has exactly one producer and one consumer. The producer only advances the
write counter and the consumer only the read counter, each after its copy, so under the GIL
neither side ever sees a half-written region and no lock is taken: a PortAudio callback must
never wait on the engine thread. Counters grow without bound (Python ints); positions in the
buffer are taken modulo the capacity.
"""

from __future__ import annotations

import math

import numpy as np

SILENCE_DBFS = -120.0  # the floor of every level: log10(0) has no value a meter can draw


def peak_dbfs(block: np.ndarray) -> float:
    """Peak level of ``block`` in dBFS (0 dBFS = full scale 1.0), floored at -120 dBFS."""
    if block.size == 0:
        return SILENCE_DBFS
    peak = float(np.max(np.abs(block)))
    if peak <= 1e-6:
        return SILENCE_DBFS
    return max(SILENCE_DBFS, 20.0 * math.log10(peak))


class Ring:
    """Single-producer single-consumer float32 mono ring of fixed ``capacity`` samples.

    ``write`` copies what fits and returns how many samples it took (the rest is the caller's
    overflow to count); ``read_into`` copies what is there and returns how many it gave.
    Neither allocates, so both are safe inside an audio callback.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity {capacity}: give at least one sample")
        self._buf = np.zeros(capacity, dtype=np.float32)
        self._cap = capacity
        self._written = 0  # producer only
        self._read = 0  # consumer only

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def available(self) -> int:
        """Samples written and not yet read."""
        return self._written - self._read

    @property
    def free(self) -> int:
        return self._cap - self.available

    @property
    def written(self) -> int:
        """Samples ever written (the producer's clock)."""
        return self._written

    @property
    def consumed(self) -> int:
        """Samples ever read or skipped (the consumer's clock)."""
        return self._read

    def write(self, samples: np.ndarray) -> int:
        """Copy as much of ``samples`` (1-D) as fits; returns the count taken. Producer only."""
        n = min(len(samples), self.free)
        if n <= 0:
            return 0
        start = self._written % self._cap
        first = min(n, self._cap - start)
        self._buf[start : start + first] = samples[:first]
        if n > first:
            self._buf[: n - first] = samples[first:n]
        self._written += n  # publish only after the copy
        return n

    def read_into(self, out: np.ndarray) -> int:
        """Fill ``out`` (1-D) from the oldest samples; returns the count given. Consumer only."""
        n = min(len(out), self.available)
        if n <= 0:
            return 0
        start = self._read % self._cap
        first = min(n, self._cap - start)
        out[:first] = self._buf[start : start + first]
        if n > first:
            out[first:n] = self._buf[: n - first]
        self._read += n  # release only after the copy
        return n

    def read(self, count: int | None = None) -> np.ndarray:
        """Take up to ``count`` samples (all when None) as a new array. Consumer only; allocates."""
        n = self.available if count is None else min(count, self.available)
        out = np.empty(n, dtype=np.float32)
        self.read_into(out)
        return out

    def peek_into(self, start: int, out: np.ndarray) -> int:
        """Copy the samples at positions ``start`` .. ``start + len(out)`` (counted as
        ``written`` counts them) that the ring still holds into ``out`` at their places; the
        others are left as they are. Consumes nothing; returns how many it copied. Consumer only.
        """
        first = max(start, self._read)
        last = min(start + len(out), self._written)
        if last <= first:
            return 0
        n = last - first
        begin = first % self._cap
        head = min(n, self._cap - begin)
        at = first - start
        out[at : at + head] = self._buf[begin : begin + head]
        if n > head:
            out[at + head : at + n] = self._buf[: n - head]
        return n

    def skip(self, count: int) -> int:
        """Drop up to ``count`` of the oldest samples (none when ``count`` <= 0); returns how
        many. Consumer only."""
        n = max(0, min(count, self.available))
        self._read += n
        return n

    def reset(self) -> None:
        """Empty the ring. Only while neither side runs (the stream is stopped)."""
        self._written = self._read = 0

"""The playback jitter buffer: whole periods in from the engine, device blocks out.

The engine thread pushes a period of PCM at a time; the output callback pulls one device
block at a time. Playback (re)starts ``prebuffer`` samples of device time after the first
sample arrives, whatever the amount queued: a whole 1-s period arriving at once must still
wait, because the margin that absorbs the engine's period jitter is that delay (a period
written up to ``prebuffer`` late still finds the buffer playing), not the amount.

When the buffer runs dry mid-playback the callback does not jump to zero (a click): the last
sample played decays linearly to silence over ``fade`` samples, the event is counted in
``dry_events``, and playback re-primes. It resumes with a linear fade-in of ``fade`` samples,
so a restart mid-waveform does not click either. ``pull`` runs inside the PortAudio callback:
it only copies, scales preallocated ramps and counts.
"""

from __future__ import annotations

import numpy as np

from app.audio.rings import Ring


class JitterBuffer:
    """Prebuffering, click-free playback buffer over a :class:`Ring` (see the module doc)."""

    def __init__(self, capacity: int, prebuffer: int, fade: int) -> None:
        if not 0 <= prebuffer < capacity:
            raise ValueError(f"prebuffer {prebuffer}: give 0 <= prebuffer < capacity {capacity}")
        if fade < 1:
            raise ValueError(f"fade {fade}: give at least one sample")
        self.ring = Ring(capacity)
        self.prebuffer = prebuffer
        self.fade = fade
        # decay[i] scales the held sample i+1 samples after the buffer ran dry (reaches 0).
        self._decay = np.linspace(1.0, 0.0, fade + 1, dtype=np.float32)[1:]
        self._rise = np.linspace(0.0, 1.0, fade + 1, dtype=np.float32)[1:]  # 1/fade .. 1
        self.playing = False
        self.dry_events = 0
        self._hold = 0.0  # the last sample played before running dry
        self._decay_pos = fade  # == fade: no decay in progress
        self._rise_pos = fade  # == fade: no fade-in in progress
        self._waited = 0  # samples of silence output while data waited below the prebuffer
        self._last = 0.0  # the last sample of the previous block (what a decay starts from)
        self._flush = False  # set by any thread, honoured by the callback: see request_flush

    def push(self, pcm: np.ndarray) -> int:
        """Queue ``pcm`` (1-D float32, device rate); returns the samples that did not fit."""
        return len(pcm) - self.ring.write(pcm)

    def request_flush(self) -> None:
        """Drop what is queued at the next block, fading out (barge-in). Any thread."""
        self._flush = True

    def pull(self, out: np.ndarray) -> int:
        """Fill ``out`` (1-D float32, one device block); returns how many queued samples it
        played (they start ``out``). Callback only; never allocates."""
        if self._flush:
            self._flush = False
            self.ring.skip(self.ring.available)
            if self.playing:
                self._stop(self._last)
        n = 0
        if not self.playing and not self._ready(len(out)):
            self._tail(out, 0)
        else:
            n = self.ring.read_into(out)
            self._fade_in(out, n)
            if n < len(out):
                self.dry_events += 1
                self._stop(float(out[n - 1]) if n else self._last)
                self._tail(out, n)
        if len(out):
            self._last = float(out[-1])
        return n

    def _ready(self, block: int) -> bool:
        avail = self.ring.available
        if avail == 0 or self._decay_pos < self.fade:
            return False
        if self._waited >= self.prebuffer:
            self.playing, self._rise_pos, self._waited = True, 0, 0
            return True
        self._waited += block
        return False

    def _fade_in(self, out: np.ndarray, n: int) -> None:
        if self._rise_pos >= self.fade or n == 0:
            return
        k = min(n, self.fade - self._rise_pos)
        out[:k] *= self._rise[self._rise_pos : self._rise_pos + k]
        self._rise_pos += k

    def _stop(self, hold: float) -> None:
        """Leave playback: the next samples decay from ``hold`` to silence."""
        self.playing = False
        self._hold, self._decay_pos = hold, 0

    def _tail(self, out: np.ndarray, start: int) -> None:
        """Silence from ``start``, after whatever is left of the decay of the held sample."""
        k = min(len(out) - start, self.fade - self._decay_pos)
        if k > 0:
            np.multiply(
                self._decay[self._decay_pos : self._decay_pos + k],
                self._hold,
                out=out[start : start + k],
            )
            self._decay_pos += k
            start += k
        out[start:] = 0.0

"""The playout queue: a model's speech, in the chunks it was made, played one period at a time.

A model makes speech in chunks of any length (a decoder call, a codec frame, a voiced clause);
a sink takes one period of samples per period. :class:`Playout` holds the chunks in order and
hands out up to one period at a time (:meth:`Playout.take`), or exactly one with silence where
the queue runs short (:meth:`Playout.period`), so the output stays continuous and aligned with
the input. Not thread-safe: one thread queues and plays.
"""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["Playout"]


class Playout:
    """Chunks of float32 mono samples, oldest first; :attr:`queued` counts their samples."""

    def __init__(self) -> None:
        self._chunks: deque[np.ndarray] = deque()
        self.queued = 0

    def __len__(self) -> int:
        """Chunks still queued (0: nothing left to play)."""
        return len(self._chunks)

    def push(self, samples: np.ndarray) -> None:
        """Queue ``samples`` (1-D) after what is queued; an empty chunk is dropped."""
        if samples.size:
            self._chunks.append(samples)
            self.queued += samples.size

    def clear(self) -> None:
        """Drop everything queued."""
        self._chunks.clear()
        self.queued = 0

    def take(self, n: int) -> np.ndarray:
        """Up to ``n`` samples from the head of the queue (fewer where it runs short)."""
        parts: list[np.ndarray] = []
        filled = 0
        while filled < n and self._chunks:
            head = self._chunks[0]
            k = min(head.size, n - filled)
            parts.append(head[:k])
            filled += k
            if k == head.size:
                self._chunks.popleft()
            else:
                self._chunks[0] = head[k:]
        self.queued -= filled
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def period(self, n: int) -> np.ndarray:
        """Exactly ``n`` float32 samples from the queue, silence where it runs short."""
        out = np.zeros(n, dtype=np.float32)
        played = self.take(n)
        out[: played.size] = played
        return out

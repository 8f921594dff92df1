"""The two audio channels of a conversation, kept for export while the session runs.

The engine thread appends each period's microphone input and assistant output; an export (on a
worker thread of its own) takes a snapshot — a list of references to immutable int16 chunks,
copied under the lock in microseconds — and concatenates and writes it without ever holding the
lock again, so an export never stalls a period.

Memory: 16-bit samples, capped at ``max_s`` seconds per channel (default one hour: about 115 MB
for the 16 kHz mic plus 173 MB for the 24 kHz assistant); past the cap the oldest periods go,
and ``trimmed_s`` says how much of the start is missing from an export.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["AudioRecorder", "Channel", "ChannelSnapshot"]


def _int16(samples: np.ndarray) -> np.ndarray:
    """float32 [-1, 1] to int16, clipped (an over-full sample must not wrap around)."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    out = np.round(clipped * 32767.0).astype(np.int16)
    out.setflags(write=False)  # shared with snapshots: nobody may change it afterwards
    return out


@dataclass(frozen=True)
class ChannelSnapshot:
    """One channel at a moment: int16 samples at ``rate`` and how much of the start was dropped."""

    name: str
    rate: int
    samples: np.ndarray
    trimmed_s: float

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.rate if self.rate else 0.0


class Channel:
    """One mono channel of int16 chunks, bounded to ``max_s`` seconds (oldest dropped first)."""

    def __init__(self, name: str, rate: int, max_s: float) -> None:
        self.name, self.rate = name, rate
        self._max_samples = int(max_s * rate)
        self._chunks: deque[np.ndarray] = deque()
        self._held = 0
        self._trimmed = 0
        self._lock = threading.Lock()

    def append(self, samples: np.ndarray) -> None:
        chunk = _int16(samples)
        if chunk.size == 0:
            return
        with self._lock:
            self._chunks.append(chunk)
            self._held += chunk.size
            while self._held > self._max_samples and len(self._chunks) > 1:
                gone = self._chunks.popleft()
                self._held -= gone.size
                self._trimmed += gone.size

    def snapshot(self) -> ChannelSnapshot:
        with self._lock:
            chunks, trimmed = list(self._chunks), self._trimmed
        samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
        return ChannelSnapshot(self.name, self.rate, samples, trimmed / self.rate)

    @property
    def seconds(self) -> float:
        with self._lock:
            return self._held / self.rate


class AudioRecorder:
    """The conversation's ``mic`` (model input rate) and ``assistant`` (output rate) channels."""

    def __init__(self, mic_rate: int, assistant_rate: int, max_s: float = 3600.0) -> None:
        self.mic = Channel("mic", mic_rate, max_s)
        self.assistant = Channel("assistant", assistant_rate, max_s)

    def add(self, mic: np.ndarray, assistant: np.ndarray) -> None:
        """Append one period of each channel (engine thread)."""
        self.mic.append(mic)
        self.assistant.append(assistant)

    def snapshot(self) -> tuple[ChannelSnapshot, ChannelSnapshot]:
        """Both channels now (any thread)."""
        return self.mic.snapshot(), self.assistant.snapshot()

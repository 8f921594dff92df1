"""A room driven by hand: the real DeviceSource and DeviceSink callbacks, no sound card.

Each tick is one 20-ms device block on a simulated 48-kHz clock: the sink's callback fills the
block that meets the DAC ``OUT_BLOCKS`` later, with PortAudio's ``outputBufferDacTime``; the
source's callback gets the block that left the ADC ``IN_BLOCKS`` earlier, with its
``inputBufferAdcTime``. What the microphone hears is the user's voice plus the speaker's sound
``ROOM`` samples after the DAC played it, times ``echo``. An xrun is a range of ticks whose
callback never ran (the speaker plays silence the tap never saw; the microphone's samples are
lost). ``timed=False`` is a host that gives 0.0 for every time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.audio import DeviceSink, DeviceSource

DEVICE_RATE, BLOCK = 48000, 960
OUT_BLOCKS, IN_BLOCKS = 6, 2  # callback -> DAC, ADC -> callback, in blocks
ROOM = 144  # samples (3 ms) from the DAC back to the ADC
T0 = 1000.0  # the stream clock's reading at tick 0


@dataclass
class Time:
    """What PortAudio hands a callback as ``time`` (its names; 0.0 where a host gives none)."""

    inputBufferAdcTime: float = 0.0
    outputBufferDacTime: float = 0.0
    currentTime: float = 0.0


@dataclass
class Status:
    input_overflow: bool = False
    input_underflow: bool = False
    output_underflow: bool = False


def speech_like(rng: np.random.Generator, n: int, rate: int, amp: float = 0.2) -> np.ndarray:
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * np.arange(n) / rate)
    return (amp * envelope * rng.standard_normal(n)).astype(np.float32)


@dataclass
class HandRoom:
    """The source and sink at ``mic_rate`` / ``out_rate``, started as far as their engine-side
    calls ask, and the world they live in (module doc)."""

    mic_rate: int
    out_rate: int
    ticks: int
    echo: float = 0.0
    timed: bool = True
    speaker_xrun: tuple[int, int] = (-1, 0)  # (first tick, ticks lost)
    mic_xrun: tuple[int, int] = (-1, 0)
    user: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # at the ADC
    source: DeviceSource = field(init=False)
    sink: DeviceSink = field(init=False)
    dac: np.ndarray = field(init=False)  # what the DAC played, by device sample

    def __post_init__(self) -> None:
        self.source = DeviceSource(None, rate=self.mic_rate)
        self.sink = DeviceSink(
            None, rate=self.out_rate, prebuffer_s=0.1, settle_s=0.0, lost_after_s=1e9
        )
        self.sink._stream = "driven by hand"  # started, as far as write() asks
        for end in (self.source, self.sink):
            end._prepare(DEVICE_RATE, BLOCK)
            end.stats.rate = DEVICE_RATE
            end.stats.latency_s = 0.06
        self.dac = np.zeros((self.ticks + OUT_BLOCKS + 2) * BLOCK, np.float32)
        self._out = np.zeros((BLOCK, 1), np.float32)

    def at(self, sample: float) -> float:
        """The stream clock's reading at device sample ``sample`` (0.0 without times)."""
        return T0 + sample / DEVICE_RATE if self.timed else 0.0

    def tick(self, tick: int) -> None:
        """One device block: the sink's callback, then the source's (unless an xrun ate it)."""
        start = (tick + OUT_BLOCKS) * BLOCK  # where this callback's block meets the DAC
        if not _lost(tick, self.speaker_xrun):
            time = Time(outputBufferDacTime=self.at(start))
            self.sink._callback(self._out, BLOCK, time, Status())
            self.dac[start : start + BLOCK] = self._out[:, 0]
        captured = (tick - IN_BLOCKS) * BLOCK  # this callback's block left the ADC here
        if captured >= ROOM and not _lost(tick, self.mic_xrun):
            heard = self.echo * self.dac[captured - ROOM : captured - ROOM + BLOCK]
            user = self.user[captured : captured + BLOCK]
            heard[: len(user)] += user
            time = Time(inputBufferAdcTime=self.at(captured))
            self.source._callback(heard[:, np.newaxis], BLOCK, time, Status())

    def read(self, samples: int) -> np.ndarray | None:
        """The source's next period as read_period hands it (echo cancelled), if it is there."""
        self.source._drain()
        if self.source._pending.available < samples:
            return None
        return self.source._take(samples)


def _lost(tick: int, xrun: tuple[int, int]) -> bool:
    return xrun[0] <= tick < xrun[0] + xrun[1]

"""The full-duplex loop on real speech: listen while the user talks, answer after, stop when
interrupted; the synthesizer sees MiniCPM-o 4.5's call pattern.

The user's side is spoken by espeak-ng (tests/speech.py); silero-vad inside the synthetic
backbone decides the turns; the small Token2Wav (CPU, 2 solver steps) synthesizes. The
synthesizer is observed through a pass-through recorder (every call reaches the real stream).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pytest
import torch
from torch import Tensor

from app.session import Session, build_session
from app.settings import Settings
from engine.arms import Arm
from engine.duplex import PeriodOutcome, Phase
from tests.speech import Conversation, conversation

pytestmark = pytest.mark.usefixtures("one_thread")

# Turn 1 ends by itself (the pause after it is longer than any answer); turn 2 is interrupted.
TALK = (
    0.5,
    "hello there, how are you doing today",
    8.5,
    "what is the weather like tomorrow",
    1.5,
    "no wait, stop, stop talking please",
    3.0,
)


@cache
def talk() -> Conversation:
    return conversation(TALK)


@dataclass
class Recorder:
    """Passes every call to the real synthesizer and writes down what it saw."""

    inner: object
    log: list[tuple[str, int, bool]] = field(default_factory=list)

    @property
    def arm(self) -> Arm:
        return self.inner.arm  # type: ignore[attr-defined,no-any-return]

    def set_arm(self, arm: Arm) -> None:
        self.inner.set_arm(arm)  # type: ignore[attr-defined]

    def push(self, tokens: Tensor, last_chunk: bool = False) -> Tensor:
        self.log.append(("push", int(tokens.shape[1]), last_chunk))
        out: Tensor = self.inner.push(tokens, last_chunk)  # type: ignore[attr-defined]
        return out

    def reset(self) -> None:
        self.log.append(("reset", 0, False))
        self.inner.reset()  # type: ignore[attr-defined]


def small_session(arm: Arm = Arm.SRC, **changes: object) -> Session:
    settings = Settings(family="synthetic", device="cpu", model_size="small", arm=arm, **changes)  # type: ignore[arg-type]
    return build_session(settings, n_steps=2)


Run = tuple[list[PeriodOutcome], list[tuple[str, int, bool]]]


@pytest.fixture(scope="module")
def run() -> Run:
    torch.set_num_threads(1)
    session = small_session()
    recorder = Recorder(session.loop.model.synthesizer)  # type: ignore[attr-defined]
    session.loop.model.synthesizer = recorder  # type: ignore[attr-defined]
    outcomes = [session.step(mic) for mic in talk().periods()]
    session.close()
    return outcomes, recorder.log


def periods_of(span: tuple[float, float]) -> range:
    return range(int(span[0]), int(np.ceil(span[1])))


def test_listens_while_the_user_speaks(run: Run) -> None:
    outcomes, _ = run
    first, second, _ = talk().speech
    for k in (*periods_of(first), *periods_of(second)):
        assert outcomes[k].phase is Phase.LISTEN, f"spoke over the user in period {k}"
        assert outcomes[k].voice_prob > 0.5
    assert outcomes[0].phase is Phase.LISTEN


def test_answers_after_the_user_pauses(run: Run) -> None:
    outcomes, _ = run
    first = talk().speech[0]
    answer = int(first[1] + 0.6)  # the pause ends in this period (or the next)
    assert Phase.SPEAK in (outcomes[answer].phase, outcomes[answer + 1].phase)
    start = next(k for k, o in enumerate(outcomes) if o.phase is Phase.SPEAK)
    assert start > first[1] - 1
    speaking = [k for k, o in enumerate(outcomes) if o.phase is Phase.SPEAK]
    assert any(np.abs(outcomes[k].pcm).max() > 0.05 for k in speaking)
    assert not any(o.pcm.any() for o in outcomes[:start]), "audio before the first answer"


def test_stops_when_interrupted(run: Run) -> None:
    outcomes, _ = run
    _, _, interruption = talk().speech
    barges = [k for k, o in enumerate(outcomes) if o.record.loop["barge_in"]]
    assert len(barges) == 1, barges
    (k,) = barges
    assert interruption[0] <= k + 1 <= interruption[0] + 2  # 0.3 s of speech stops it
    assert outcomes[k].phase is Phase.LISTEN
    assert [c.kind for c in outcomes[k].calls] == ["last"]
    # After the last call's fade-out, silence while the user keeps talking.
    for o in outcomes[k + 1 : int(interruption[1])]:
        assert o.phase is Phase.LISTEN and not o.pcm.any()


def test_the_synthesizer_sees_minicpmo_call_pattern(run: Run) -> None:
    _, log = run
    turns, current = [], []
    for entry in log:
        current.append(entry)
        if entry[0] == "reset":
            turns.append(current)
            current = []
    assert len(turns) >= 2 and all(e[0] == "push" for e in current)
    for turn in turns:
        *pushes, last, reset = turn
        assert reset == ("reset", 0, False)
        assert pushes[0] == ("push", 28, False), "a turn starts with a full-window flush"
        assert all(p == ("push", 28, False) for p in pushes[1:]), "steady 28-token windows"
        assert last[0] == "push" and last[2] and 1 <= last[1] <= 28, "last_chunk ends the turn"


def test_every_period_is_one_period_of_audio(run: Run) -> None:
    outcomes, _ = run
    assert all(o.pcm.shape == (24_000,) and o.pcm.dtype == np.float32 for o in outcomes)
    assert all(o.record.loop["queued_samples"] < 24_000 for o in outcomes)
    calls = [c for o in outcomes for c in o.calls]
    flushes = [k for k, o in enumerate(outcomes) if any(c.kind == "flush" for c in o.calls)]
    assert len(flushes) >= 2 and calls[0].kind == "flush"
    record = outcomes[flushes[0]].record
    names = {s["name"] for s in record.spans}
    assert {"backbone", "synthesis", "flow", "vocoder"} <= names
    assert record.loop["phase"] == "speak" and record.loop["calls"][0]["tokens"] == 28


def test_mic_must_be_one_period() -> None:
    session = small_session()
    with pytest.raises(ValueError, match=r"\(16000,\) float32"):
        session.step(np.zeros(1000, np.float32))
    session.close()


def test_push_to_talk_mutes_the_mic_until_held() -> None:
    session = small_session(push_to_talk=True)
    periods = talk().periods()[:6]
    outcomes = [session.step(mic) for mic in periods]
    assert all(o.voice_prob < 0.5 and o.phase is Phase.LISTEN for o in outcomes)
    session.set_push_to_talk(True)
    assert session.step(periods[1]).voice_prob > 0.5
    session.close()

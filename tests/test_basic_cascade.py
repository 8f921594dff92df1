"""The basic cascade's turn logic and threading, with stand-in models (fast, no weights).

The stand-ins answer at once (or block on an Event where the test needs the worker busy); the
speech is real (espeak-ng), so silero-vad and the turn-taker run as in use. The worker is driven
by feeding silence until the turn ends, polling: what is asserted is what was heard, said and
played, never how many periods it took.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from adapters.basic.cascade import JOIN_S, PAD_S, STOP_S, BasicCascade, joined
from adapters.basic.family import PERIOD_S as PERIOD_S_BASIC
from adapters.basic.folders import BasicModels
from bench.basic_cpu import period_pcm
from engine.duplex import DuplexLoop, PeriodStep, Phase
from engine.metrics import Metrics
from tests.speech import conversation

PERIOD_S = 0.5
OUT_RATE = 8000  # the stand-in voice's rate: any rate with whole periods works
TONE_S = 0.4  # each voiced clause: a tone this long


class Ears:
    """Hears every utterance as ``text``; ``gate`` (when given) holds it until set."""

    rate = 16000

    def __init__(
        self, text: str = "what is the capital of france", gate: threading.Event | None = None
    ):
        self.text, self.gate, self.heard = text, gate, 0
        self.segments: list[np.ndarray] = []  # what it was handed
        self.cancels: list[threading.Event | None] = []  # with each, its job's cancellation

    def transcribe(self, audio: np.ndarray, cancelled: threading.Event | None = None) -> str:
        self.segments.append(audio)
        self.cancels.append(cancelled)
        if self.gate is not None:
            self.gate.wait(timeout=30)
        self.heard += 1
        return self.text


class Mouth:
    """Says ``clauses``, one ``say`` each, stopping when cancelled."""

    def __init__(self, clauses: tuple[str, ...] = ("Paris,", "in France.")) -> None:
        self.clauses = clauses

    def reply(self, question: str, say: Callable[[str], None], cancelled: threading.Event) -> str:
        for clause in self.clauses:
            if cancelled.is_set():
                break
            say(clause)
        return " ".join(self.clauses)


class Tone:
    """A 440 Hz tone of ``seconds`` per clause."""

    rate = OUT_RATE

    def __init__(self, seconds: float = TONE_S) -> None:
        self.seconds = seconds

    def speak(self, text: str) -> np.ndarray:
        t = np.arange(round(self.seconds * self.rate)) / self.rate
        return (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


@pytest.fixture
def make() -> Iterator[Callable[..., BasicCascade]]:
    made: list[BasicCascade] = []

    def build(
        ears: Ears | None = None,
        mouth: Mouth | None = None,
        tone: Tone | None = None,
        realtime: bool = True,
        speculate: bool = True,
    ) -> BasicCascade:
        parts = (ears or Ears(), mouth or Mouth(), tone or Tone())
        cascade = BasicCascade(*parts, PERIOD_S, realtime=realtime, speculate=speculate)
        made.append(cascade)
        return cascade

    yield build
    for cascade in made:
        cascade.close()


def feed(cascade: BasicCascade, audio: np.ndarray) -> list[PeriodStep]:
    n = cascade.input_samples
    padded = np.zeros(-(-audio.size // n) * n, dtype=np.float32)
    padded[: audio.size] = audio
    return [cascade.step(padded[i : i + n]) for i in range(0, padded.size, n)]


def until_turn_end(cascade: BasicCascade, limit_s: float = 30.0) -> list[PeriodStep]:
    """Silence, period after period (polling the worker), until the assistant's turn ends."""
    silence = np.zeros(cascade.input_samples, dtype=np.float32)
    steps: list[PeriodStep] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        steps.append(cascade.step(silence))
        if steps[-1].turn_end:
            return steps
        time.sleep(0.005)
    raise AssertionError(f"the turn did not end within {limit_s} s")


def loud(steps: list[PeriodStep]) -> int:
    return sum(int(np.count_nonzero(np.abs(period_pcm(s)) > 1e-3)) for s in steps)


def played(step: PeriodStep) -> bool:
    return bool(period_pcm(step).any())


def heard(steps: list[PeriodStep]) -> str:
    return " ".join(s.heard for s in steps if s.heard)


def said(steps: list[PeriodStep]) -> str:
    """The periods' texts concatenated (each carries its own spacing)."""
    return "".join(s.text for s in steps).strip()


def test_a_question_gets_every_clause_spoken_once(make):
    cascade = make()
    steps = feed(cascade, conversation([0.5, "what is the capital of france", 0.2]).audio)
    steps += until_turn_end(cascade)
    assert all(period_pcm(s).size <= cascade.output_samples for s in steps)  # never ahead
    assert heard(steps) == "what is the capital of france"
    assert said(steps) == "Paris, in France."
    # Both clauses played in full (tones are continuous: a sample near a zero crossing of the
    # sine may be under the threshold, so count with a little slack).
    assert loud(steps) >= 0.97 * 2 * TONE_S * OUT_RATE
    speaking = [s for s in steps if s.phase is Phase.SPEAK]
    assert speaking and speaking[-1].turn_end and not speaking[-1].barge_in
    assert sum(s.turn_end for s in steps) == 1
    assert not cascade.in_turn


def test_the_recognizer_gets_the_whole_utterance_framed_by_silence(make):
    ears = Ears()
    cascade = make(ears)
    talk = conversation([1.0, "what is the capital of france", 0.2])
    feed(cascade, talk.audio)
    until_turn_end(cascade)
    segment, pad = ears.segments[-1], round(PAD_S * cascade.input_rate)
    assert pad > 0 and not segment[:pad].any() and not segment[-pad:].any()
    cut = segment[pad:-pad]
    voiced = np.flatnonzero(cut)
    assert np.count_nonzero(cut) == np.count_nonzero(talk.audio)  # every spoken sample
    assert voiced[0] > 0.1 * cascade.input_rate  # and the input's own silence around it
    assert cut.size - voiced[-1] > 0.1 * cascade.input_rate


def test_steps_never_wait_for_the_models(make):
    gate = threading.Event()
    cascade = make(ears=Ears(gate=gate))
    feed(cascade, conversation([0.5, "what is the capital of france", 1.5]).audio)
    assert cascade.in_turn  # the turn was taken; the recognizer is still blocked
    silence = np.zeros(cascade.input_samples, dtype=np.float32)
    for _ in range(5):
        began = time.monotonic()
        step = cascade.step(silence)
        # a step is ~ms; one that waited on the worker would wait out the gate (30 s)
        assert time.monotonic() - began < 10.0
        assert step.phase is Phase.SPEAK and not played(step) and not step.turn_end
    gate.set()
    assert loud(until_turn_end(cascade)) > 0


@pytest.mark.parametrize("later", range(8))
def test_barge_in_stops_the_answer(make, later):
    """The user talks over a loud answer ``later`` periods after it is first heard: a period
    (8,000 samples) is 15.625 VAD windows, so the 8 values put the window grid at every place it
    can fall on the user's first word. (Weighed one 32-ms window at a time against the echo
    bar, a dip inside "no wait" broke the 0.3 s of voice a barge-in needs at 5 of the 8.)"""
    cascade = make(mouth=Mouth(tuple(f"clause {i}." for i in range(40))), tone=Tone(1.0))
    feed(cascade, conversation([0.5, "tell me a long story", 0.2]).audio)
    silence = np.zeros(cascade.input_samples, dtype=np.float32)
    deadline = time.monotonic() + 30
    while not played(cascade.step(silence)):  # until the answer is heard
        assert time.monotonic() < deadline
        time.sleep(0.005)
    for _ in range(later):
        assert played(cascade.step(silence))
    steps = feed(cascade, conversation(["no wait, stop talking please", 0.3]).audio)
    barged = [s for s in steps if s.barge_in]
    assert len(barged) == 1 and barged[0].turn_end and barged[0].phase is Phase.LISTEN
    after = steps[steps.index(barged[0]) :]
    assert not any(played(s) for s in after)  # nothing of the old answer plays after it


class Lengths(Ears):
    """Hears each segment as its length in samples: what it heard says which cut it was."""

    def transcribe(self, audio: np.ndarray, cancelled: threading.Event | None = None) -> str:
        super().transcribe(audio)
        return f"heard {audio.size}"


def test_speech_that_resumes_cancels_the_speculative_answer(make):
    ears = Lengths()
    cascade = make(ears=ears)
    # A 0.3-s pause inside the question (shorter than the turn-taker's 0.6 s): the first half
    # starts a speculative job, the second half cancels it; one answer, to the whole question.
    talk = conversation([0.5, "what is the capital", 0.3, "of france", 0.2])
    steps = feed(cascade, talk.audio) + until_turn_end(cascade)
    assert sum(s.turn_end for s in steps) == 1
    assert said(steps) == "Paris, in France."
    spec = cascade.speculation
    assert spec.discards >= 1 and spec.hits == 1 and spec.at_take == 0
    assert spec.started == spec.discards + spec.hits
    # only the whole question's words are shown: a discarded job's never are
    assert heard(steps) == f"heard {ears.segments[-1].size}"


def test_a_recognition_in_flight_is_told_its_job_was_dropped(make):
    """The worker is inside the first job's recognition (gated) when the voice comes back: that
    recognition sees its cancellation set, so the real recognizer may skip its decoder; the
    whole question's job is not cancelled and is answered."""
    gate = threading.Event()
    ears = Ears(gate=gate)
    # 0.1-s periods: a period ends inside the pause, while its job is still live
    cascade = BasicCascade(ears, Mouth(), Tone(), period_s=0.1)
    talk = conversation([0.5, "what is the capital", 0.3, "of france", 0.2]).audio
    n = cascade.input_samples
    talk = np.concatenate([talk, np.zeros(-talk.size % n, dtype=np.float32)])
    steps = []
    for i in range(0, talk.size, n):
        steps.append(cascade.step(talk[i : i + n]))
        deadline = time.monotonic() + 30
        spec = cascade.speculation
        while spec.started > spec.discards and not ears.segments:  # until the worker is in it
            assert time.monotonic() < deadline
            time.sleep(0.005)
    assert cascade.speculation.discards >= 1
    first = ears.cancels[0]
    assert first is not None and first.is_set()
    gate.set()
    steps += until_turn_end(cascade)
    assert said(steps) == "Paris, in France."
    last = ears.cancels[-1]
    assert last is not None and not last.is_set() and len(ears.segments) >= 2
    cascade.close()


@pytest.mark.parametrize(
    "parts", [["what is the capital of france"], ["what is the capital", 0.3, "of france"]]
)
def test_the_speculative_cut_is_the_cut_at_the_take(make, parts) -> None:
    """The job begun at the first silent window hears, bit for bit, what a job begun only when
    the turn is taken hears: the same audio, so (the recognizer deterministic) the same words."""
    early, late = Ears(), Ears()
    talk = conversation([0.5, *parts, 0.2]).audio
    for ears, speculate in ((early, True), (late, False)):
        cascade = make(ears=ears, speculate=speculate)
        steps = feed(cascade, talk) + until_turn_end(cascade)
        assert said(steps) == "Paris, in France."
        taken = cascade.speculation
        assert (taken.hits, taken.at_take) == ((1, 0) if speculate else (0, 1))
    assert len(late.segments) == 1
    assert np.array_equal(early.segments[-1], late.segments[0])
    # it began at the first silent window: the cut keeps one window of input after the voice,
    # the rest of the 0.2 s of quiet is zeros
    tail = early.segments[-1][: -round(PAD_S * 16000)][-round(STOP_S * 16000) :]
    assert not tail[512 * 1 :].any()


def test_a_sound_too_short_to_answer_starts_no_job(make):
    ears = Ears()
    cascade = make(ears=ears)
    click = np.zeros(round(1.5 * 16000), dtype=np.float32)
    speech = conversation(["what"]).audio[: round(0.1 * 16000)]
    click[8000 : 8000 + speech.size] = speech
    steps = feed(cascade, click)
    assert cascade.speculation.started == 0 and not ears.segments
    assert not any(s.phase is Phase.SPEAK for s in steps)


def test_nothing_heard_ends_the_turn_in_silence(make):
    cascade = make(ears=Ears(text=" "))
    steps = feed(cascade, conversation([0.5, "hmm, well", 0.2]).audio) + until_turn_end(cascade)
    assert steps[-1].turn_end and not any(played(s) for s in steps)


def test_reset_drops_the_answer_in_flight(make):
    gate = threading.Event()
    cascade = make(ears=Ears(gate=gate))
    feed(cascade, conversation([0.5, "what is the capital of france", 1.5]).audio)
    assert cascade.in_turn
    cascade.reset()
    gate.set()
    silence = np.zeros(cascade.input_samples, dtype=np.float32)
    steps = [cascade.step(silence) for _ in range(6)]
    assert all(s.phase is Phase.LISTEN and not played(s) for s in steps)


def test_a_period_must_be_whole_samples_at_both_rates():
    with pytest.raises(ValueError, match="whole number of samples"):
        BasicCascade(Ears(), Mouth(), Tone(), period_s=0.3333)


def test_on_a_simulated_clock_steps_wait_for_the_answer(make):
    # A blocked recognizer, released from another thread after 0.3 s: the take's period waits
    # for it, so the answer starts in that very period however fast the periods come.
    gate = threading.Event()
    cascade = make(ears=Ears(gate=gate), realtime=False)
    threading.Timer(0.3, gate.set).start()
    steps = feed(cascade, conversation([0.5, "what is the capital of france", 1.5]).audio)
    speaking = [s for s in steps if s.phase is Phase.SPEAK]
    assert speaking and played(speaking[0]) and speaking[0].heard
    assert loud(steps) >= 0.97 * 2 * TONE_S * OUT_RATE and speaking[-1].turn_end


def test_the_loop_plays_it_period_by_period(make):
    cascade = make(realtime=False)
    loop = DuplexLoop(cascade, Metrics(cascade.period_s, device="cpu", arm="eager"), None, None)
    n = cascade.input_samples
    talk = conversation([0.5, "what is the capital of france", 2.0]).audio
    talk = np.concatenate([talk, np.zeros(-talk.size % n, dtype=np.float32)])
    outcomes = [loop.step(talk[i : i + n]) for i in range(0, talk.size, n)]
    assert all(o.pcm.shape == (cascade.output_samples,) for o in outcomes)
    out = np.concatenate([o.pcm for o in outcomes])
    assert np.count_nonzero(np.abs(out) > 1e-3) >= 0.97 * 2 * TONE_S * OUT_RATE
    assert "".join(o.text for o in outcomes).strip() == "Paris, in France."
    assert not loop.in_turn


def test_closing_a_basic_session_ends_the_cascades_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's close ends the worker thread (mid-answer here), so no model thread runs
    while the process exits: a thread left inside a native call aborted the window's exit
    ("terminate called without an active exception")."""
    import adapters.basic.load
    from app.session import build_session
    from app.settings import Settings
    from tests.default_family import basic_present

    basic_present(monkeypatch)
    gate = threading.Event()  # the worker stays busy hearing until the session closes

    def stand_ins(
        period_s: float,
        progress: object,
        realtime: bool = True,
        device: str = "cpu",
        models: BasicModels | None = None,
    ) -> BasicCascade:
        assert device == "cpu"  # the session's device reaches the models
        assert models == BasicModels()  # no checkpoint: the shipped ones
        return BasicCascade(Ears(gate=gate), Mouth(), Tone(), period_s, realtime=realtime)

    monkeypatch.setattr(adapters.basic.load, "load_basic", stand_ins)
    session = build_session(Settings(family="basic", device="cpu"))
    workers = [t for t in threading.enumerate() if t.name == "basic-cascade" and t.is_alive()]
    assert len(workers) == 1
    speech = conversation([0.3, "what is the capital of france", 1.5]).audio
    n = session.loop.input_samples
    for i in range(0, speech.size - n + 1, n):
        session.step(speech[i : i + n])
    gate.set()  # the worker finishes its model call; close cancels the rest and joins
    session.close()
    assert not workers[0].is_alive()
    session.close()  # idempotent


class Speech:
    """Speaks each clause with espeak-ng at 16 kHz: its echo is speech to the VAD too."""

    rate = 16000

    def speak(self, text: str) -> np.ndarray:
        return conversation([text]).audio


def room(
    cascade: BasicCascade, user: np.ndarray, echo_gain: float, seconds: float, delay_s: float = 0.2
) -> list:
    """Step ``user`` (then silence) through a room where the microphone also hears what the
    cascade played, ``echo_gain`` times as loud and ``delay_s`` later (the sink's queue, the
    devices' latencies, the air). The cascade runs on the simulated clock (``realtime=False``):
    a speaking period waits for the worker, so what plays, and when, is the same however busy
    the machine is (on a real clock the answer raced the steps: espeak-ng voicing a clause had
    the wall time of the remaining periods to finish in)."""
    n = cascade.input_samples
    air = np.zeros(round(delay_s * cascade.output_rate) + n, dtype=np.float32)  # not yet heard
    user = np.concatenate([user, np.zeros(round(seconds * 16000), np.float32)])
    steps = []
    for start in range(0, user.size - n + 1, n):
        mic = user[start : start + n] + echo_gain * air[:n]
        steps.append(cascade.step(mic.astype(np.float32)))
        out = np.zeros(n, dtype=np.float32)
        pcm = period_pcm(steps[-1])
        out[: pcm.size] = pcm
        air = np.concatenate([air[n:], out])
    return steps


@pytest.mark.parametrize("echo_gain", [0.05, 0.08])
def test_it_does_not_answer_its_own_voice(make, echo_gain: float) -> None:
    """On speakers the answer comes back through the microphone (here 26 and 22 dB down, what
    echo cancellation leaves): it must neither barge in on itself nor answer itself. It did:
    42 'answers' to one question until Stop."""
    ears = Ears()
    cascade = BasicCascade(
        ears, Mouth(("Paris is the capital,", "and a lovely city.")), Speech(), realtime=False
    )
    try:
        steps = room(cascade, conversation([0.5, "what is the capital of france", 0.2]).audio,
                     echo_gain, seconds=12.0)  # fmt: skip
    finally:
        cascade.close()
    assert sum(played(s) for s in steps) >= 2  # the answer was heard in the room
    assert ears.heard == 1 and not any(s.barge_in for s in steps)
    assert sum(s.turn_end for s in steps) == 1
    assert cascade.own_voice > 0  # its voice was heard, and taken for its own


def test_a_late_echo_of_its_last_words_is_still_its_own_voice() -> None:
    """The echo of an answer's tail is heard after the answer ended. On the project's PipeWire
    device it came 0.8-1.0 s after its period (the sink's queue after a late period, 0.12 s of
    latency at each end); with 0.4 s of memory (two of the family's periods) that tail was
    answered (tests/test_basic_speakers.py). The family's period, the echo 1.0 s late."""
    ears = Ears()
    cascade = BasicCascade(
        ears,
        Mouth(("Paris is the capital,", "and a lovely city.")),
        Speech(),
        PERIOD_S_BASIC,
        realtime=False,
    )
    try:
        steps = room(cascade, conversation([0.5, "what is the capital of france", 0.2]).audio,
                     0.08, seconds=8.0, delay_s=1.0)  # fmt: skip
    finally:
        cascade.close()
    assert sum(played(s) for s in steps) >= 2
    assert ears.heard == 1 and not any(s.barge_in for s in steps)
    assert sum(s.turn_end for s in steps) == 1


def test_its_own_voice_would_set_it_talking_to_itself_without_the_gate(make) -> None:
    """The same room with the gate off: the echo is answered (the test above has teeth)."""
    ears = Ears()
    cascade = BasicCascade(
        ears,
        Mouth(("Paris is the capital,", "and a lovely city.")),
        Speech(),
        self_voice=0.0,
        realtime=False,
    )
    try:
        room(cascade, conversation([0.5, "what is the capital of france", 0.2]).audio, 0.08, 12.0)
    finally:
        cascade.close()
    assert ears.heard > 1


def test_the_user_who_speaks_up_over_it_still_barges_in(make) -> None:
    ears = Ears()
    clauses = tuple(f"this is clause number {i} of a long answer." for i in range(8))
    cascade = BasicCascade(ears, Mouth(clauses), Speech(), realtime=False)
    question = conversation([0.5, "tell me a long story", 0.2]).audio
    try:
        steps = room(cascade, question, 0.05, seconds=3.0)
        assert any(played(s) for s in steps[-3:])  # it is answering
        steps += room(cascade, conversation(["no wait, stop talking please"]).audio, 0.05, 1.0)
    finally:
        cascade.close()
    assert sum(s.barge_in for s in steps) == 1


def test_a_clause_ending_inside_a_sentence_keeps_little_of_its_quiet() -> None:
    rate = 1000
    voiced = np.full(500, 0.5, dtype=np.float32)
    quiet = np.full(200, 0.001, dtype=np.float32)
    out = joined(np.concatenate([voiced, quiet]), rate)
    assert out.size == 500 + round(JOIN_S * rate)
    assert np.array_equal(out[:500], voiced) and out[-1] == 0.0
    assert np.all(np.diff(out[500:]) <= 0)  # faded out
    short = np.concatenate([voiced, quiet[:10]])
    assert np.array_equal(joined(short, rate), short)  # short enough already
    assert np.array_equal(joined(quiet, rate), quiet)  # nothing voiced: as it is

"""The basic family: turn-taking, speech recognition, a reply and a voice, period by period.

:class:`BasicCascade` is a cascade, not a full-duplex model: it listens with silero-vad and the
shared :class:`~adapters.turns.taker.TurnTaker` (the same thresholds), and when
the user's turn ends it transcribes the utterance, lets a small language model answer, and
speaks the answer clause by clause. Barge-in (the user talks over it) stops the answer at once.

Threads. :meth:`BasicCascade.step` and :meth:`BasicCascade.reset` run on the engine thread and
never wait on a model: each costs the VAD's ~0.1 ms per 32-ms window and some copying. One
worker thread (started at construction, a daemon, ended by :meth:`BasicCascade.close`) runs the
slow part of each user turn, a *job*: recognition (~0.9 CPU-s), then the reply, whose clauses
are voiced as they complete (~0.7 CPU-s to the first clause, ~0.3 CPU-s to voice it; p50 of
bench/results/basic_cpu.json). A job
posts what it has (``heard``, then each ``say`` with its audio, then ``done``) to its own queue;
``step`` drains the current job's queue without blocking and plays silence until audio is
there. Jobs are cancelled through an ``Event`` the worker checks after every token and before
every clause; a cancelled job's queue is dropped with it, so nothing stale is ever played.

Speculation. A job starts the moment the VAD first sees the user's voice stop (the first silent
window), not when the turn-taker hands over the turn (``pause_s`` = 0.6 s later): by the take,
recognition is done and the first clause is on its way. Its output is held until the take; if
the user speaks again first (or the sound was too short to answer), the job is cancelled (its
words never shown, its clauses never played) and the next silence starts a new one over the
whole utterance. The cut does not depend on when it is made: after the last voiced window it
keeps ``tail_s`` (one window) of the input, zeros up to ``stop_s`` (0.2 s, whole windows), then
``pad_s`` of zeros, so the speculative job hears exactly the audio a job started at the take
would hear, and (the recognizer being deterministic) its words are the take's. Before, the job
started 0.2 s into the silence and the cut kept all 0.2 s of it; the zeros in their place left
the dev half's words as they were, question for question (bench/README.md; one window of input
and no zeros instead heard 4 of 20 otherwise, WER 18.4% against 15.4%).
:attr:`BasicCascade.speculation` counts the jobs started early, taken (hits), dropped
(discards) and started only at the take. A job dropped in a pause inside a question still
holds the worker until its recognition returns: Whisper's encoder cannot be stopped mid-call,
but a job dropped by then skips the decoder (~40% of a recognition's time).
bench/basic_cpu.py measures end of speech to first reply audio, with a breakdown.

Breaks. The reply's first clause may end inside a sentence (after a few words, so the voice
starts early: ``adapters.basic.reply``); Piper ends every clause with 0.07-0.13 s of quiet as if
it were a sentence's end, so a clause that ends on a word (no punctuation) keeps only
``JOIN_S`` of the quiet after its last sample above ``QUIET`` (faded out): the next clause
follows it as the next word would.

Clocks. On a real clock (``realtime=True``: a microphone, or a file paced like one) a step never
waits: the answer plays when it is ready, as it would live. On a simulated clock (a file run as
fast as it goes) the periods would outrun the worker and the answer would land after the input
ended, so with ``realtime=False`` a speaking step waits for the worker until it has a period of
audio or the answer is done: the output is then the same whatever the machine's speed.

Its own voice. On speakers the microphone hears the answer too (echo cancellation leaves a residue,
most of all while it converges: the first 0.2-0.4 s of an answer came back at full level on the
project's PipeWire device), and the answer's tail still plays after the period that handed out its
last sample (the sink's queue, both devices' latencies). A voiced window counts as the user only
when it is louder (its level over 96 ms, a syllable, ending with it) than ``self_voice`` times the
loudest window the cascade played in the last ``echo_s`` seconds: quieter voice is taken for its
own (0.1: 20 dB down, what echo cancellation leaves). ``echo_s`` outlasts the echo's path: measured
on that device under load, an answer's echo came 0.8-1.0 s after its period (a period of audio, the
sink's prebuffer and what a late period left queued, 0.12 s of latency at each end); with 0.4 s of
memory the tail of an answer, heard after it ended, was answered. So it does not answer itself, nor
barge in on itself; a user who speaks up over it does. With nothing played lately the reference is
zero and every voiced window counts. (The reference is the output's level, not the microphone's: a
microphone set far quieter than the voice makes barging in harder.)

Output: a :class:`~engine.duplex.PeriodStep` (it is an ``engine.duplex.PeriodModel``) whose audio
is at most one period, the part of the answer this period plays: the loop's playout queue stays
empty, so a barge-in silences the answer at once. The phase is ``SPEAK`` from the take (the
assistant holds the floor while it thinks) to the period that plays its last sample
(``turn_end``). ``text`` is the clauses whose audio was queued this period; ``heard`` what the
recognizer heard, in the period it is first known. Nothing is replayed: the arm is
kept for the loop and changes nothing.
"""

from __future__ import annotations

import math
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from adapters.turns.taker import Floor, TurnEvent, TurnParams, TurnTaker
from adapters.turns.vad import RATE, WINDOW, VoiceActivity
from engine.arms import Arm
from engine.duplex import PeriodStep, Phase, SpanFactory, untimed
from engine.playout import Playout

__all__ = [
    "JOIN_S",
    "PAD_S",
    "QUIET",
    "STOP_S",
    "TAIL_S",
    "BasicCascade",
    "Hearing",
    "Replying",
    "Speaking",
    "Speculation",
    "joined",
]

PAD_S = 0.2  # the recognizer's segment: this much silence before and after the utterance
TAIL_S = WINDOW / RATE  # the input kept after the voice stops: the first silent window
LEVEL_WINDOWS = 3  # VAD windows whose level is weighed against the echo (96 ms: a syllable)
STOP_S = 0.2  # the cut's quiet after the voice stops: TAIL_S of input, then zeros (then PAD_S)
QUIET = 0.01  # a voiced clause's trailing samples below this are its quiet (Breaks, above)
JOIN_S = 0.03  # the quiet kept at the end of a clause that ends inside a sentence


class Hearing(Protocol):
    """Speech recognition of one whole utterance; it may give up ("") once ``cancelled`` is
    set (between its stages: a call already inside a model runs to its end)."""

    rate: int

    def transcribe(self, audio: np.ndarray, cancelled: threading.Event | None = None) -> str: ...


class Replying(Protocol):
    """A reply to one question, handed clause by clause to ``say`` while it is generated."""

    def reply(
        self, question: str, say: Callable[[str], None], cancelled: threading.Event
    ) -> str: ...


class Speaking(Protocol):
    """Text to float32 mono PCM at ``rate``."""

    rate: int

    def speak(self, text: str) -> np.ndarray: ...


@dataclass
class Speculation:
    """How the jobs of one conversation started (:attr:`BasicCascade.speculation`)."""

    started: int = 0  # at the voice's stop, before the take
    hits: int = 0  # taken: no voice came back before the take, so its words are the answer's
    discards: int = 0  # dropped before the take: the voice came back (or a reset, too short)
    at_take: int = 0  # started only at the take (no early job was running)


@dataclass
class _Job:
    """One utterance's recognition and reply, run on the worker thread."""

    audio: np.ndarray
    early: bool  # started before the take (speculatively)
    taken: bool = False  # the turn was taken with this job: its output plays
    cancelled: threading.Event = field(default_factory=threading.Event)
    events: queue.SimpleQueue[tuple[str, str, np.ndarray | None]] = field(
        default_factory=queue.SimpleQueue
    )


class BasicCascade:
    """Silero-vad turn-taking → recognition → reply → voice, one period per :meth:`step`; an
    ``engine.duplex.PeriodModel`` (and ``StageTimed``: the step's VAD and turn-taking are ``vad``).

    Args:
        recognizer: speech recognition at 16 kHz (``adapters.basic.hearing.Recognizer``).
        replier: the language model (``adapters.basic.reply.Replier``).
        voice: the voice (``adapters.basic.voice.Voice``); its rate is the output rate.
        period_s: the period; ``period_s`` times each rate must be a whole number of samples.
        turns: turn-taking thresholds (the synthetic family's defaults).
        preroll_s: audio kept before the first voiced window, so a soft onset is not cut.
        pad_s: silence added before and after the utterance handed to the recognizer, as VAD
            pipelines pad their segments (chosen on the question set's dev half).
        tail_s: the input kept after the user's voice stops (rounded up to whole VAD
            windows; one window: the first silent window).
        stop_s: the cut's quiet after the user's voice stops, before the pad: ``tail_s`` of
            input, then zeros (whole VAD windows, at least ``tail_s``).
        speculate: start the job as soon as the cut's tail is seen, before the turn is taken
            (False: at the take; the cut, so the words, are the same: module docstring).
        max_utterance_s: the longest utterance recognized (Whisper hears at most 30 s).
        realtime: the clock is real (a step never waits); False: a speaking step waits for the
            worker (a simulated clock; see the module docstring).
        wait_s: the longest a step waits for the worker when ``realtime`` is False.
        self_voice: a voiced window quieter (rms over :data:`LEVEL_WINDOWS` windows) than this
            times the loudest window played in the last ``echo_s`` seconds is taken for the
            cascade's own voice (module docstring).
        echo_s: how long what it played stays the reference for its own voice (module doc).
    """

    def __init__(
        self,
        recognizer: Hearing,
        replier: Replying,
        voice: Speaking,
        period_s: float = 0.5,
        turns: TurnParams | None = None,
        preroll_s: float = 0.3,
        pad_s: float = PAD_S,
        tail_s: float = TAIL_S,
        stop_s: float = STOP_S,
        speculate: bool = True,
        max_utterance_s: float = 30.0,
        realtime: bool = True,
        wait_s: float = 300.0,
        self_voice: float = 0.1,
        echo_s: float = 2.0,
    ) -> None:
        if recognizer.rate != RATE:
            raise ValueError(f"the recognizer hears {recognizer.rate} Hz; silero-vad needs {RATE}")
        self.period_s, self.input_rate, self.output_rate = period_s, RATE, voice.rate
        self.input_samples = _samples(period_s, self.input_rate)
        self.output_samples = _samples(period_s, self.output_rate)
        self.recognizer, self.replier, self.voice = recognizer, replier, voice
        self.realtime, self.wait_s, self.self_voice = realtime, wait_s, self_voice
        self._arm = Arm.EAGER
        self._span: SpanFactory = untimed
        self.vad = VoiceActivity()
        self.taker = TurnTaker(turns)
        self._tail = self.taker.params.windows(tail_s)
        stop = max(self._tail, self.taker.params.windows(stop_s))
        self._stop = np.zeros((stop - self._tail) * WINDOW, dtype=np.float32)
        self._speculate = speculate
        self._preroll = round(preroll_s * RATE)
        self._pad = np.zeros(round(pad_s * RATE), dtype=np.float32)
        self._max_utterance = round(max_utterance_s * RATE)
        self._echo_periods = max(1, math.ceil(echo_s / period_s - 1e-9))  # periods remembered
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._job: _Job | None = None
        self._worker = threading.Thread(target=self._work, name="basic-cascade", daemon=True)
        self._worker.start()
        self.reset()

    @property
    def in_turn(self) -> bool:
        """True while the assistant holds the turn (thinking or talking)."""
        return self.taker.speaking

    @property
    def arm(self) -> Arm:
        """The loop's arm; the cascade replays nothing, so every arm computes the same."""
        return self._arm

    def set_arm(self, arm: Arm) -> None:
        self._arm = Arm(arm)

    def set_stage_timer(self, span: SpanFactory | None) -> None:
        self._span = span or untimed

    def reset(self) -> None:
        """A fresh conversation: the job cancelled, VAD and floor reset, playout emptied."""
        self._cancel()
        self.vad.reset()
        self.taker.reset()
        self._heard = np.zeros(0, dtype=np.float32)  # recent input, from sample _heard_start on
        self._heard_start = 0
        self._windows = 0  # VAD windows seen; window w covers samples [w·512, (w+1)·512)
        self._run_start = 0  # the window where the current voiced run began
        self._quiet = 0  # unvoiced windows since the user's voice last stopped
        self._utterance = 0  # the sample where the user's current utterance begins
        self._done = False  # the current job posted ``done``
        self.speculation = Speculation()
        self._playout = Playout()
        # the loudest window played, per period, over the last ``echo_s``
        self._played: deque[float] = deque([0.0], maxlen=self._echo_periods)
        self.own_voice = 0  # voiced windows taken for the cascade's own voice

    def close(self) -> None:
        """Stop the worker thread (after its current model call); the cascade is unusable after."""
        self._cancel()
        self._jobs.put(None)
        self._worker.join(timeout=30)

    def step(self, mic: np.ndarray) -> PeriodStep:
        """Hear one period of ``mic`` (float32 mono, ``period_s · 16000`` samples) and answer."""
        audio = np.asarray(mic, dtype=np.float32)
        if audio.shape != (self.input_samples,):
            raise ValueError(
                f"mic has shape {audio.shape}; pass one period of mono audio: "
                f"({self.input_samples},) float32 samples at {self.input_rate} Hz"
            )
        with self._span("vad"):
            self._remember(audio)
            probs = self.vad.push(audio)
            was_speaking = self.taker.speaking
            event = TurnEvent.NONE
            echo = self.self_voice * max(self._played)
            for prob in probs.tolist():
                if prob >= self.taker.params.off and self._window_rms() < echo:
                    prob, self.own_voice = 0.0, self.own_voice + 1  # its own voice, not the user
                happened = self._window(prob, hold=event is not TurnEvent.NONE)
                event = happened if happened is not TurnEvent.NONE else event
        voice = float(probs.max()) if probs.size else 0.0
        if was_speaking and event is TurnEvent.BARGE_IN:
            self._played.append(0.0)
            return PeriodStep(Phase.LISTEN, (), voice, turn_end=True, barge_in=True)
        if not self.taker.speaking:
            self._played.append(0.0)
            return PeriodStep(Phase.LISTEN, (), voice)
        heard, said = self._drain()
        pcm = self._playout.take(self.output_samples)
        self._played.append(_loudest(pcm, round(self.taker.params.window_s * self.output_rate)))
        ended = self._done and not self._playout
        if ended:
            self.taker.finish()
            self._job = None
        return PeriodStep(
            Phase.SPEAK,
            (torch.from_numpy(pcm),) if pcm.size else (),
            voice,
            turn_end=ended,
            text=said,
            heard=heard,
        )

    # -- the engine thread's side -----------------------------------------------------------

    def _window(self, prob: float, hold: bool) -> TurnEvent:
        """One VAD window through the turn-taker; jobs start and stop as the floor moves."""
        floor, voiced = self.taker.floor, self.taker.voiced
        event = self.taker.update(prob, hold=hold)
        window = self._windows
        self._windows += 1
        if self.taker.voiced and not voiced:
            self._run_start = window
        self._quiet = 0 if self.taker.voiced else self._quiet + 1
        if self.taker.floor is Floor.USER and floor is not Floor.USER:  # a new utterance
            self._cancel()  # a barge-in's answer, if any
            self._utterance = max(0, self._run_start * WINDOW - self._preroll)
        if event is TurnEvent.TAKE:
            if self._job is not None:  # begun when the voice stopped, none since: it stands
                self._job.taken = True
                self.speculation.hits += 1
            else:
                self._start(early=False).taken = True
                self.speculation.at_take += 1
        elif self.taker.floor is Floor.USER:
            if self._speculate and self._quiet == self._tail and self.taker.heard_enough:
                self._start(early=True)  # the cut is whole: recognize it now
                self.speculation.started += 1
            elif self.taker.voiced and not voiced:  # it spoke again: that answer is stale
                self._cancel()
        elif floor is Floor.USER and self.taker.floor is Floor.IDLE:  # too short to answer
            self._cancel()
        return event

    def _window_rms(self) -> float:
        """Rms of the input around the window the VAD's next probability is about (``_windows``):
        that window and the :data:`LEVEL_WINDOWS` - 1 before it (a syllable). One 32-ms window
        alone dips within a word (a consonant): taken for the cascade's own voice, it broke the
        consecutive voice a barge-in needs, and a user talking over a loud answer was not
        heard (a window at 0.036 rms against a 0.035 bar, by where the window grid fell)."""
        end = (self._windows + 1) * WINDOW - self._heard_start
        window = self._heard[max(0, end - LEVEL_WINDOWS * WINDOW) : max(0, end)]
        return float(np.sqrt(np.mean(window**2))) if window.size else 0.0

    def cut(self) -> np.ndarray:
        """The utterance the recognizer hears: the pad, the input from the utterance's start
        (less the preroll) to ``tail_s`` after its last voiced window, zeros to ``stop_s``, the
        pad. The same whenever it is made once that tail is seen (no window after it counts)."""
        end = (self._windows - self._quiet + self._tail) * WINDOW
        start = max(self._utterance, end - self._max_utterance, self._heard_start)
        cut = self._heard[start - self._heard_start : end - self._heard_start]
        return np.concatenate([self._pad, cut, self._stop, self._pad])

    def _start(self, early: bool) -> _Job:
        """Send the utterance's cut to the worker as the current job."""
        self._cancel()
        job = _Job(self.cut(), early)
        self._job, self._done = job, False
        self._jobs.put(job)
        return job

    def _cancel(self) -> None:
        if self._job is not None:
            self._job.cancelled.set()
            if self._job.early and not self._job.taken:
                self.speculation.discards += 1
        self._job, self._done = None, False
        if hasattr(self, "_playout"):
            self._playout.clear()

    def _remember(self, audio: np.ndarray) -> None:
        """Append ``audio`` to the recent input, keeping what an utterance may still need."""
        self._heard = np.concatenate([self._heard, audio])
        end = self._heard_start + self._heard.size
        keep = end - self._max_utterance - self._preroll
        if self.taker.floor is not Floor.USER:
            keep = max(keep, end - self._preroll - 2 * self.input_samples)  # a barge-in's onset
        if keep > self._heard_start:
            self._heard = self._heard[keep - self._heard_start :]
            self._heard_start = keep

    def _drain(self) -> tuple[str, str]:
        """Take what the current job has posted: (heard text, clauses queued for playback).

        With ``realtime`` False, wait for more until a period of audio is queued or it is done.
        """
        heard, said = [], []
        job = self._job
        while job is not None and not self._done:
            short = self._playout.queued < self.output_samples
            try:
                if self.realtime or not short:
                    kind, text, pcm = job.events.get_nowait()
                else:
                    kind, text, pcm = job.events.get(timeout=self.wait_s)
            except queue.Empty:
                if self.realtime or not short:
                    break
                raise RuntimeError(
                    f"the basic voice's answer stalled for {self.wait_s:.0f} s: the machine is "
                    "too busy, or a model hangs"
                ) from None
            if kind == "heard":
                heard.append(text)
            elif kind == "say" and pcm is not None:
                said.append(text)
                self._playout.push(pcm)
            elif kind == "failed":
                raise RuntimeError(f"the basic voice failed while answering: {text}")
            elif kind == "done":
                self._done = True
        return " ".join(heard), "".join(f" {clause}" for clause in said)

    # -- the worker thread ------------------------------------------------------------------

    def _work(self) -> None:
        """Run jobs in order until ``close``; every job ends with ``done`` (or ``failed``)."""
        while (job := self._jobs.get()) is not None:
            if job.cancelled.is_set():
                continue
            try:
                self._answer(job)
            except Exception as exc:  # reported on the engine thread, by step()
                job.events.put(("failed", f"{type(exc).__name__}: {exc}", None))
            job.events.put(("done", "", None))

    def _answer(self, job: _Job) -> None:
        text = self.recognizer.transcribe(job.audio, job.cancelled)
        job.events.put(("heard", text, None))
        if job.cancelled.is_set() or not any(c.isalnum() for c in text):
            return

        def say(clause: str) -> None:
            if not job.cancelled.is_set():
                pcm = self.voice.speak(clause)
                if clause.rstrip()[-1:].isalnum():  # it ends inside a sentence
                    pcm = joined(pcm, self.output_rate)
                job.events.put(("say", clause, pcm))

        self.replier.reply(text, say, job.cancelled)


def joined(pcm: np.ndarray, rate: int) -> np.ndarray:
    """``pcm`` with only ``JOIN_S`` of its trailing quiet (below ``QUIET``), faded out; as it
    is when it is all quiet or its quiet is that short already."""
    loud = np.flatnonzero(np.abs(pcm) >= QUIET)
    if not loud.size:
        return pcm
    end = min(pcm.size, int(loud[-1]) + 1 + round(JOIN_S * rate))
    if end == pcm.size:
        return pcm
    out = pcm[:end].copy()
    tail = end - int(loud[-1]) - 1
    out[end - tail :] *= np.linspace(1.0, 0.0, tail, dtype=np.float32)
    return out


def _loudest(pcm: np.ndarray, window: int) -> float:
    """The largest rms over ``window``-sample windows of ``pcm`` (0 for none)."""
    usable = pcm.size - pcm.size % window if pcm.size >= window else 0
    if usable == 0:
        return float(np.sqrt(np.mean(pcm**2))) if pcm.size else 0.0
    blocks = pcm[:usable].reshape(-1, window)
    return float(np.sqrt((blocks**2).mean(axis=1)).max())


def _samples(period_s: float, rate: int) -> int:
    samples = period_s * rate
    if period_s <= 0 or abs(samples - round(samples)) > 1e-6:
        raise ValueError(
            f"period_s={period_s} gives {samples} samples at {rate} Hz: choose a period that is a "
            "whole number of samples at both rates (0.5 or 1.0 s)"
        )
    return round(samples)

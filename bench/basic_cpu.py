"""End of speech to first reply audio of the basic family on the CPU, questions heard in real time.

    python3 bench/basic_cpu.py --out bench/results/basic_cpu.json          # 10 questions
    python3 bench/basic_cpu.py --out /tmp/b.json --questions 3             # a quick look

Each question (espeak-ng, ``tests/speech.py``) is heard after 1 s of silence, then silence until
the answer ends, period by period at the pace of a microphone: period ``k``'s audio is handed to
``step`` at ``t0 + (k + 1)·period_s``, when a microphone would have delivered it. The latency of
a turn is the wall time from the end of the question (``t0 +`` its last sample) to the first
non-silent sample of the answer, which plays at ``max(step returned, period delivered) +`` its
offset in the period: it includes the turn-taker's pause (0.6 s), one period of buffering, the
models and the engine thread's own delay. The result JSON has p50/p95, each turn (what was
heard and said, the answer's duration, its transcript by the same recognizer), load time, peak
RSS, the machine's load average before and after (two cores are easily shared: a busy machine
reads slow), date and command.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.basic.cascade import BasicCascade
from adapters.basic.family import PERIOD_S
from adapters.basic.load import load_basic
from bench.env_info import environment
from engine.duplex import PeriodStep, Phase
from tests.speech import conversation

QUESTIONS = (
    "What is the capital of France?",
    "How are you doing today?",
    "Can you tell me a joke?",
    "What is your favorite color?",
    "What should I cook for dinner tonight?",
    "Where do penguins live?",
    "How many legs does a spider have?",
    "What is the biggest animal in the world?",
    "Tell me something about the moon.",
    "Why is the sky blue?",
)
LEAD_S = 1.0  # silence before each question


class Stamps:
    """Wall-clock and process CPU stamps of the worker's model calls (wraps the cascade's
    recognizer and voice). The CPU seconds barely depend on how busy the machine is: while the
    worker runs a job the engine thread costs ~0.1 ms per 32-ms window, so the process's CPU time
    is the models' work."""

    def __init__(self, cascade: BasicCascade) -> None:
        self.calls: list[tuple[str, float, float, float, float]] = []  # what, wall, cpu
        hear, speak = cascade.recognizer.transcribe, cascade.voice.speak
        cascade.recognizer.transcribe = self._timed("recognize", hear)  # type: ignore[method-assign]
        cascade.voice.speak = self._timed("speak", speak)  # type: ignore[method-assign]

    def _timed(self, what: str, call: Any) -> Any:
        def timed(arg: Any) -> Any:
            began, cpu = time.monotonic(), time.process_time()
            out = call(arg)
            self.calls.append((what, began, time.monotonic(), cpu, time.process_time()))
            return out

        return timed

    def breakdown(self, eos: float, first: float | None) -> dict[str, float]:
        """Behind the first audio (the last recognition started before it, the first synthesis
        after that): when each ran, in seconds after the end of speech, and its CPU seconds."""
        if first is None:
            return {}
        hears = [c for c in self.calls if c[0] == "recognize" and c[2] <= first]
        if not hears:
            return {}
        _, began, heard, cpu_began, cpu_heard = hears[-1]
        out = {
            "recognition_began": began - eos,
            "recognized": heard - eos,
            "recognition_cpu": cpu_heard - cpu_began,
        }
        speaks = [c for c in self.calls if c[0] == "speak" and c[1] >= heard]
        if speaks:
            _, ready, voiced, cpu_ready, cpu_voiced = speaks[0]
            out |= {
                "first_clause_ready": ready - eos,
                "first_clause_voiced": voiced - eos,
                "first_clause_cpu": cpu_ready - cpu_heard,  # the reply model, to its first clause
                "first_synthesis_cpu": cpu_voiced - cpu_ready,
            }
        return {k: round(v, 3) for k, v in out.items()}


@dataclass
class Turn:
    """One question and its answer, as the cascade streamed them."""

    question: str
    heard: str  # the recognizer's transcript of the question
    said: str  # the reply's text, clause by clause as voiced
    latency_s: float | None  # end of the question to the first reply audio (None: no audio)
    answer_s: float  # seconds of the answer from its first to its last non-silent sample
    periods: int  # periods from the question's start to the turn's end
    slowest_step_ms: float  # the engine thread's longest step
    after_eos_s: dict[str, float]  # when the models behind the first audio ran (Stamps)
    audio: np.ndarray = field(repr=False)  # the answer's PCM at the voice's rate (not in JSON)
    answer_heard: str = ""  # the answer's audio through the recognizer (filled by the caller)

    def facts(self) -> dict[str, Any]:
        """Everything but the audio, as plain JSON."""
        return {k: v for k, v in vars(self).items() if k != "audio"}


def ask(
    cascade: BasicCascade, question: str, stamps: Stamps | None = None, timeout_s: float = 60.0
) -> Turn:
    """Speak ``question`` to a fresh conversation of ``cascade`` in real time, until its turn
    ends. Fresh: the VAD's state would otherwise carry the silence after the last answer, whose
    length depends on the wall clock, and move where the utterance is cut."""
    cascade.reset()
    talk = conversation([LEAD_S, question])
    eos = talk.speech[-1][1]
    period = cascade.period_s
    mic = talk.periods(period)
    silence = np.zeros(cascade.input_samples, dtype=np.float32)
    heard, said, pcm = [], [], []
    first: float | None = None
    slowest = 0.0
    t0 = time.monotonic()
    k = 0
    while True:
        due = t0 + (k + 1) * period
        time.sleep(max(0.0, due - time.monotonic()))
        began = time.monotonic()
        step = cascade.step(mic[k] if k < len(mic) else silence)
        done = time.monotonic()
        slowest = max(slowest, done - began)
        heard.append(step.heard)
        said.append(step.text)
        if step.phase is Phase.SPEAK:
            made = period_pcm(step)  # starts at the period's start
            pcm.append(made)
            loud = np.flatnonzero(np.abs(made) > 1e-4)
            if first is None and loud.size:
                first = max(done, due) + loud[0] / cascade.output_rate
        k += 1
        if step.turn_end or k * period > timeout_s:
            break
    if not step.turn_end:
        raise RuntimeError(f"no answer to {question!r} within {timeout_s} s")
    audio = np.concatenate(pcm) if pcm else np.zeros(0, dtype=np.float32)
    loud = np.flatnonzero(np.abs(audio) > 1e-4)
    turn = Turn(
        question=question,
        heard=" ".join(t for t in heard if t),
        said=" ".join(t for t in said if t),
        latency_s=None if first is None else round(first - (t0 + eos), 3),
        answer_s=round((loud[-1] - loud[0]) / cascade.output_rate, 2) if loud.size else 0.0,
        periods=k,
        slowest_step_ms=round(slowest * 1000, 2),
        after_eos_s=stamps.breakdown(t0 + eos, first) if stamps is not None else {},
        audio=audio,
    )
    return turn


def period_pcm(step: PeriodStep) -> np.ndarray:
    """The audio a step made, as one float32 array (empty when it made none)."""
    if not step.audio:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate([part.reshape(-1).numpy() for part in step.audio])


def transcribe_answer(cascade: BasicCascade, turn: Turn) -> str:
    """The answer's audio through the cascade's recognizer (call it while no turn is running)."""
    if turn.audio.size == 0:
        return ""
    return cascade.recognizer.transcribe(soxr.resample(turn.audio, cascade.output_rate, 16000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the result JSON")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="how many to ask")
    parser.add_argument(
        "--period", type=float, default=PERIOD_S, help=f"seconds (the family uses {PERIOD_S})"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    began = time.monotonic()
    cascade = load_basic(period_s=args.period)
    load_s = time.monotonic() - began
    stamps = Stamps(cascade)
    turns = []
    for question in QUESTIONS[: args.questions]:
        turn = ask(cascade, question, stamps)
        turn.answer_heard = transcribe_answer(cascade, turn)
        turns.append(turn)
        print(
            f"{turn.latency_s} s {turn.after_eos_s} {turn.heard!r} -> {turn.said!r}",
            file=sys.stderr,
        )
    cascade.close()
    latencies = [t.latency_s for t in turns if t.latency_s is not None]
    result = {
        "environment": environment(" ".join(sys.argv)),
        "machine": {"cpus": os.cpu_count(), "load_average_before": load_before},
        "period_s": args.period,
        "load_s": round(load_s, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "latency_s": {
            "what": "end of the spoken question to the first reply audio, wall clock",
            "n": len(latencies),
            "p50": round(float(np.percentile(latencies, 50)), 3) if latencies else None,
            "p95": round(float(np.percentile(latencies, 95)), 3) if latencies else None,
            "max": max(latencies, default=None),
        },
        "after_eos_s_p50": {
            key: round(
                float(np.median([t.after_eos_s[key] for t in turns if key in t.after_eos_s])), 3
            )
            for key in dict.fromkeys(k for t in turns for k in t.after_eos_s)
        },
        "turns": [t.facts() for t in turns],
    }
    result["machine"]["load_average_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["latency_s"]), file=sys.stderr)


if __name__ == "__main__":
    main()

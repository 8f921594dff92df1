"""The basic family on the CPU: how well it hears and answers, and how soon, questions heard in
real time.

    python3 bench/basic_cpu.py --out bench/results/basic_cpu.json        # the 40-question set
    python3 bench/basic_cpu.py --out bench/results/basic_cpu.json --latency-only   # on a quiet
        # machine: replaces only the latency block (quality does not depend on the load)
    python3 bench/basic_cpu.py --out /tmp/b.json --split dev --questions 3          # a quick look

The questions are the spoken question set (``tests/basic_questions.py``: 40 everyday questions,
five espeak-ng voices, four speeds, every fourth over noise; a dev half to choose on and a test
half to report). Each is heard after 1 s of silence, then silence until the answer ends, period
by period at the pace of a microphone: period ``k``'s audio is handed to ``step`` at
``t0 + (k + 1)·period_s``, when a microphone would have delivered it; each in a fresh
conversation, so what is heard and said depends on the audio alone (no model samples).

Quality: the recognizer's word error rate over the questions (``jiwer`` after lower-casing,
dropping punctuation and spelling small numbers; beside it, after Whisper's own English
normalizer) and the answers' accuracy (the answer contains
one of the question's words), per split. Latency: the wall time from the end of the question
(``t0 +`` its last sample) to the first non-silent sample of the answer, which plays at
``max(step returned, period delivered) +`` its offset in the period: it includes the VAD's
first silent window (where the answer starts speculatively, ``--cut-tail``), one period of
buffering, the models and the engine thread's own delay, with the machine's load average
beside it (two cores are easily shared: a busy machine reads slow) and the cascade's
speculative starts, hits and discards summed. The JSON also has each turn (heard, said, right or
not, latency, speculation, the answer's transcript by the same recognizer), load time, peak RSS,
date and command.
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

from adapters.basic.cascade import TAIL_S, BasicCascade
from adapters.basic.family import MODELS, PERIOD_S, folder_facts
from adapters.basic.folders import BasicModels, find_models
from adapters.basic.load import load_basic
from adapters.face import FamilyError
from bench.env_info import environment
from engine.duplex import PeriodStep, Phase
from tests.basic_questions import (
    QUESTIONS,
    Question,
    split,
    whisper_word_error_rate,
    word_error_rate,
)
from tests.speech import conversation

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
        def timed(*args: Any) -> Any:
            began, cpu = time.monotonic(), time.process_time()
            out = call(*args)
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
    speculation: dict[str, int]  # the cascade's jobs: started early, hits, discards, at the take
    audio: np.ndarray = field(repr=False)  # the answer's PCM at the voice's rate (not in JSON)
    answer_heard: str = ""  # the answer's audio through the recognizer (filled by the caller)

    def facts(self) -> dict[str, Any]:
        """Everything but the audio, as plain JSON."""
        return {k: v for k, v in vars(self).items() if k != "audio"}


def ask(
    cascade: BasicCascade,
    question: str | Question,
    stamps: Stamps | None = None,
    timeout_s: float = 120.0,
) -> Turn:
    """Speak ``question`` (espeak-ng's default voice for a string; a set's question in its own
    voice, speed and noise) to a fresh conversation of ``cascade``, until its turn ends: in real
    time when ``cascade.realtime``, else as fast as the cascade answers (a simulated clock: the
    same cut, the same words, no latency). Fresh: the VAD's state would otherwise carry the
    silence after the last answer, whose length depends on the wall clock, and move where the
    utterance is cut."""
    cascade.reset()
    talk = conversation([LEAD_S, question]) if isinstance(question, str) else question.talk(LEAD_S)
    text = question if isinstance(question, str) else question.text
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
        if cascade.realtime:
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
            if first is None and loud.size and cascade.realtime:
                first = max(done, due) + loud[0] / cascade.output_rate
        k += 1
        if step.turn_end or k * period > timeout_s:
            break
    if not step.turn_end:
        raise RuntimeError(f"no answer to {text!r} within {timeout_s} s")
    audio = np.concatenate(pcm) if pcm else np.zeros(0, dtype=np.float32)
    loud = np.flatnonzero(np.abs(audio) > 1e-4)
    turn = Turn(
        question=text,
        heard=" ".join(t for t in heard if t),
        said=" ".join(t for t in said if t),
        latency_s=None if first is None else round(first - (t0 + eos), 3),
        answer_s=round((loud[-1] - loud[0]) / cascade.output_rate, 2) if loud.size else 0.0,
        periods=k,
        slowest_step_ms=round(slowest * 1000, 2),
        after_eos_s=stamps.breakdown(t0 + eos, first) if stamps is not None else {},
        speculation=vars(cascade.speculation).copy(),
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
    heard = soxr.resample(turn.audio, cascade.output_rate, cascade.recognizer.rate)
    return cascade.recognizer.transcribe(heard)


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    """p50, p95 and max of ``values`` (None when empty), with their count."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    return {
        "n": len(values),
        "p50": round(float(np.percentile(values, 50)), 3),
        "p95": round(float(np.percentile(values, 95)), 3),
        "max": round(max(values), 3),
    }


def quality(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Recognition WER and answer accuracy, per split and over all the questions asked (each
    turn's record: the question's ``index`` in the set, what was ``heard`` and ``said``)."""
    out: dict[str, Any] = {"wer": {}, "wer_whisper_normalizer": {}, "accuracy": {}, "n": {}}
    asked = [(QUESTIONS[t["index"]], t) for t in turns]
    for name in ("dev", "test", "all"):
        pairs = [(q, t) for q, t in asked if name in ("all", q.split)]
        if not pairs:
            continue
        out["n"][name] = len(pairs)
        truths, heard = [q.text for q, _ in pairs], [t["heard"] for _, t in pairs]
        out["wer"][name] = round(word_error_rate(truths, heard), 4)
        out["wer_whisper_normalizer"][name] = round(whisper_word_error_rate(truths, heard), 4)
        right = sum(q.correct(t["said"]) for q, t in pairs)
        out["accuracy"][name] = round(right / len(pairs), 4)
    return out


def latency(turns: list[Turn], load_before: tuple[float, ...], skipped: int) -> dict[str, Any]:
    """End of speech to first audio over ``turns``, with the machine's load beside it
    (``skipped``: the recognizer's decoder passes skipped meanwhile)."""
    return {
        "what": "end of the spoken question to the first reply audio, wall clock",
        "environment": environment(" ".join(sys.argv)),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        **percentiles([t.latency_s for t in turns if t.latency_s is not None]),
        "after_eos_s_p50": {
            key: round(
                float(np.median([t.after_eos_s[key] for t in turns if key in t.after_eos_s])), 3
            )
            for key in dict.fromkeys(k for t in turns for k in t.after_eos_s)
        },
        "speculation": {
            key: sum(t.speculation[key] for t in turns)
            for key in dict.fromkeys(k for t in turns for k in t.speculation)
        },
        "decodes_skipped": skipped,  # discarded recognitions that skipped Whisper's decoder
    }


TARGETS = {"accuracy": 0.90, "wer": 0.10, "latency_p50_s": 1.5}  # issue 23, on 2 idle cores


def run(
    cascade: BasicCascade, questions: list[Question], realtime: bool, stamps: Stamps
) -> list[Turn]:
    """Ask every question, in real time or on a simulated clock, printing each as it ends."""
    cascade.realtime = realtime
    turns = []
    for question in questions:
        turn = ask(cascade, question, stamps)
        turns.append(turn)
        mark = "ok " if question.correct(turn.said) else "NO "
        print(f"{mark}{turn.latency_s} s {turn.heard!r} -> {turn.said!r}", file=sys.stderr)
    return turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the result JSON")
    parser.add_argument(
        "--split", choices=("all", "dev", "test"), default="all", help="which questions to ask"
    )
    parser.add_argument("--questions", type=int, default=None, help="ask only the first N")
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--latency-only",
        action="store_true",
        help="the real-time pass only; it replaces the latency block of an existing --out (the "
        "latency depends on the machine's load, the quality does not)",
    )
    only.add_argument(
        "--quality-only",
        action="store_true",
        help="the simulated-clock pass only (WER, accuracy); it replaces that block of --out",
    )
    parser.add_argument(
        "--period", type=float, default=PERIOD_S, help=f"seconds (the family uses {PERIOD_S})"
    )
    parser.add_argument(
        "--cut-tail",
        type=float,
        default=TAIL_S,
        help=f"seconds of input the cut keeps after the voice stops, the job starting once they "
        f"are seen (the cascade uses {TAIL_S:.3f}, one VAD window; 0.2 as before 2026-12-02 "
        "afternoon, seven windows)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="DIR",
        help="a larger reply model's or recognizer's folder, or one holding both "
        "(adapters/basic/folders.py); default: the shipped models",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")
    args = parser.parse_args()
    try:
        models = BasicModels() if args.checkpoint is None else find_models(args.checkpoint)
    except FamilyError as error:
        parser.error(f"--{error}")
    questions = list(split(args.split)[: args.questions])
    result: dict[str, Any] = {}
    load_before = os.getloadavg()
    began = time.monotonic()
    cascade = load_basic(
        period_s=args.period, tail_s=args.cut_tail, device=args.device, models=models
    )
    result |= {
        "environment": environment(" ".join(sys.argv)),
        "machine": {"cpus": os.cpu_count(), "load_average_before": load_before},
        "models": MODELS | folder_facts(models) | {"compute_device": args.device},
        "period_s": args.period,
        "cut_tail_s": args.cut_tail,
        "load_s": round(time.monotonic() - began, 1),
        "targets": TARGETS,
    }
    stamps = Stamps(cascade)
    if not args.latency_only:
        turns = run(cascade, questions, False, stamps)
        records = [
            t.facts() | {"correct": q.correct(t.said)} | facts(q)
            for q, t in zip(questions, turns, strict=True)
        ]
        result["turns"] = records
    if not args.quality_only:
        load_before = os.getloadavg()
        skipped = getattr(cascade.recognizer, "skipped", 0)
        timed = run(cascade, questions, True, stamps)
        skipped = getattr(cascade.recognizer, "skipped", 0) - skipped
        result["latency_s"] = latency(timed, load_before, skipped)
    cascade.close()
    result["machine"]["load_average_after"] = os.getloadavg()
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # Merged with what --out already holds (read now, so a run of each split may go at once):
    # the other pass's block, and the turns of questions this run did not ask.
    before = json.loads(args.out.read_text()) if args.out.exists() else {}
    if "turns" in result:
        kept = {r["index"]: r for r in before.get("turns", [])} | {
            r["index"]: r for r in result["turns"]
        }
        result["turns"] = [kept[i] for i in sorted(kept)]
        result["quality"] = quality(result["turns"])
    result = before | result
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: result.get("quality", {}).get(k) for k in ("wer", "accuracy")}
    latency_p50 = result.get("latency_s", {}).get("p50")
    print(json.dumps(summary | {"latency_p50_s": latency_p50}), file=sys.stderr)


def facts(question: Question) -> dict[str, Any]:
    """How a question was spoken, for its turn's record."""
    keys = ("index", "split", "voice", "speed", "snr_db")
    return {key: getattr(question, key) for key in keys}


if __name__ == "__main__":
    main()

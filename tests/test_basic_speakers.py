"""The basic voice on speakers: one answer per question, never an answer to itself.

The room of issue 21: the private PipeWire null sink is the speaker, and its monitor is the
microphone, so the microphone hears every word the assistant says (loud laptop speakers).
``duplexcadence converse --headless --family basic`` runs on those two devices with the
defaults (echo cancellation on); a user speaks two questions of the spoken question set into the
same sink (``pw-play``), each once the assistant has finished the answer before and a quiet
spell has passed. What was seen period by period comes from the run's JSONL trace (one line per
period, written as it goes): one answer per question, no barge-in, two utterances heard. Then
SIGTERM ends the run as a user would (exit 143, the files whole).

Bounds, by cause (speed is the benchmark's business, bench/basic_cpu.py):
- ``QUIET_S``: after the answer's last period, how long a self-heard tail needs to start a
  second answer. The tail reaches the microphone after the sink's queue and both devices'
  latencies (PortAudio reports 0.1-0.2 s each here; printed), and the turn-taker takes the
  floor after its 0.6-s pause, which the trace shows at once as a speaking period (the phase is
  ``speak`` from the take, before any model runs). Periods are counted in the trace, so a
  busy machine that delays them delays the count too.
- ``ANSWER_S``: a hang guard only: the longest a question may wait for its answer to end.
  One answer is ~1 CPU-second of models to its first clause and ~2-3 s of speech
  (bench/results/basic_cpu.json); a hundred seconds is far beyond a busy 2-core machine.
- ``LOAD_S``: a hang guard on loading the models: ~25 s on two idle cores, 75 s on a busy one
  (tests/test_basic_voice.py), 160 s at load 4 and over 300 s at load 15 (seen here).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from adapters.basic.shipped import check_installed
from tests.audio_env import ROOT, AudioEnv, play_to_mic, virtual_audio  # noqa: F401  (fixture)
from tests.basic_questions import split

pytestmark = [pytest.mark.audio, pytest.mark.slow, pytest.mark.timeout(900, method="thread")]

QUESTIONS = split("dev")[:2]  # the first two by place (never picked by their answers)
LEAD_S = 0.5  # silence in the question's WAV before it speaks
QUIET_S = 4.0
ANSWER_S = 100.0
LOAD_S = 600.0


@dataclass
class Tail:
    """The period records of a growing JSONL trace, read as they are written."""

    path: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)  # when each record was read (monotonic)
    _offset: int = 0

    def poll(self) -> list[dict[str, Any]]:
        """The records written since the last poll (a line still being written waits)."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        new = [json.loads(line) for line in whole.splitlines() if line.strip()]
        new = [r for r in new if "loop" in r]  # the header has none
        self.records += new
        self.seen += [time.monotonic()] * len(new)
        return new

    def until(self, done: Any, limit_s: float, what: str, child: subprocess.Popen[bytes]) -> None:
        """Poll until ``done(records)``; fail after ``limit_s`` or if the run ended."""
        deadline = time.monotonic() + limit_s
        while not done(self.records):
            if child.poll() is not None:
                raise AssertionError(f"converse ended (status {child.returncode}) before {what}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {limit_s:.0f} s; {summary(self.records)}")
            time.sleep(0.1)
            self.poll()


def answers(records: list[dict[str, Any]]) -> list[tuple[int, int | None]]:
    """Each answer as (first speaking period, the period its turn ended or None): a run of
    speaking periods, from the take to the period that played its last sample."""
    runs: list[tuple[int, int | None]] = []
    speaking = False
    for k, r in enumerate(records):
        loop = r["loop"]
        if loop["phase"] == "speak" and not speaking:
            runs.append((k, None))
            speaking = True
        if speaking and loop["turn_end"]:
            runs[-1] = (runs[-1][0], k)
            speaking = False
    return runs


def summary(records: list[dict[str, Any]]) -> str:
    heard = [r["loop"]["heard"] for r in records if r["loop"].get("heard")]
    said = "".join(r["loop"].get("text", "") for r in records)
    return f"{len(records)} periods, answers {answers(records)}, heard {heard}, said {said!r}"


@pytest.fixture
def basic_installed() -> None:
    try:
        check_installed()
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def wavs(tmp_path: Path) -> Iterator[list[tuple[Path, float]]]:
    """Each question's WAV and when its speech ends in it (seconds)."""
    talks = [(q, q.talk(LEAD_S, 0.2)) for q in QUESTIONS]
    yield [(t.write(tmp_path / f"q{q.index}.wav"), t.speech[-1][1]) for q, t in talks]


def test_on_speakers_the_basic_voice_answers_each_question_once(
    basic_installed: None,
    virtual_audio: AudioEnv,  # noqa: F811
    wavs: list[tuple[Path, float]],
    tmp_path: Path,
) -> None:
    trace = tmp_path / "room.json"
    argv = [sys.executable, "-m", "app.cli", "converse", "--headless", "--family", "basic"]
    argv += ["--device", "cpu", "--quiet", "--trace", str(trace)]
    argv += ["--input-device", virtual_audio.input_device]
    argv += ["--output-device", virtual_audio.output_device]
    env = {**virtual_audio.env, "PYTHONPATH": str(ROOT)}
    err = tmp_path / "stderr.txt"
    tail = Tail(trace.with_suffix(".jsonl"))
    spoken: list[float] = []  # the earliest each question's speech can have ended (monotonic)
    with err.open("wb") as errors:
        child = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=errors)
        try:
            tail.until(lambda rs: len(rs) >= 5, LOAD_S, "the first periods", child)  # it runs
            for k, (wav, speech_end) in enumerate(wavs):
                asked = len(tail.records)
                spoken.append(time.monotonic() + speech_end)  # pw-play only adds its own delay
                user = play_to_mic(wav, virtual_audio)
                assert user.wait(timeout=60) == 0, "pw-play failed"

                def answered(rs: list[dict[str, Any]], k: int = k, asked: int = asked) -> bool:
                    runs = answers(rs[asked:])
                    return (bool(runs) and runs[0][1] is not None) or len(answers(rs)) > k + 1

                tail.until(answered, ANSWER_S, f"the answer to question {k + 1}", child)
                end = answers(tail.records)[-1][1] or len(tail.records)
                quiet = end + 1 + round(QUIET_S / tail.records[0]["period_s"])
                tail.until(lambda rs, q=quiet: len(rs) >= q, 60, "the quiet spell", child)
            child.send_signal(signal.SIGTERM)
            out, _ = child.communicate(timeout=60)
        finally:
            child.kill()
    tail.poll()
    stderr = err.read_text(errors="replace")
    print(f"\n{summary(tail.records)}\nstderr: {stderr[-1500:]}")
    assert child.returncode == 143, stderr[-3000:]
    result = json.loads(out)
    print(f"audio: {result.get('audio')}")
    runs = answers(tail.records)
    heard = [r["loop"]["heard"] for r in tail.records if r["loop"].get("heard")]
    assert len(runs) == len(QUESTIONS), f"one answer per question: {summary(tail.records)}"
    assert all(end is not None for _, end in runs), summary(tail.records)
    assert not any(r["loop"]["barge_in"] for r in tail.records), summary(tail.records)
    assert len(heard) == len(QUESTIONS) and result["barge_ins"] == 0, summary(tail.records)
    assert result["said"].strip(), result
    source, sink = result["audio"]["source"], result["audio"]["sink"]
    assert not source["lost"] and not sink["lost"], result["audio"]
    # The response latency, from the ADC time of the speech's end to the DAC time of the
    # answer's first sound, one per answer (the period that learnt it carries it). By cause:
    # positive (the answer follows the speech), and at most the time from when the speech can
    # have ended to when the test read that period, plus the output latency PortAudio reports
    # (a DAC time lies that far ahead of the callback that learnt it).
    measured = [(k, r["loop"]) for k, r in enumerate(tail.records) if "response_ms" in r["loop"]]
    print(f"response: {[(k, m['response_ms'], m['response_by']) for k, m in measured]}")
    assert len(measured) == len(QUESTIONS), summary(tail.records)
    assert all(m["response_by"] == "timestamps" for _, m in measured), measured
    assert source["timestamps"] and sink["timestamps"], result["audio"]
    assert result["response_ms"] == [m["response_ms"] for _, m in measured]
    for (k, m), ended in zip(measured, spoken, strict=True):
        bound = tail.seen[k] - ended + sink["latency_s"]
        assert 0 < m["response_ms"] / 1e3 < bound, (m, bound)
    assert os.path.getsize(trace.with_suffix(".jsonl")) > 0

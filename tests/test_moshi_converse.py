"""Moshi through the app's loop: the face, the period model and ``converse --headless``.

Small config on the CPU (the same code path as the 7B): espeak-ng speech in, resampled to
Mimi's 24 kHz by the session's input rate; the trace, its exports and the transcript get the
model's text pieces.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr

from adapters.face import ModelRequest
from adapters.registry import family, family_keys
from app.cli import main
from engine.arms import Arm
from engine.trace import read_trace
from engine.trace_export import validate_chrome_trace
from tests.speech import conversation

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def talk_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    talk = conversation([0.2, "hello moshi, how are you doing today", 0.4])
    path = tmp_path_factory.mktemp("talk") / "talk.wav"
    soundfile.write(path, soxr.resample(talk.audio, 16_000, 22_050), 22_050, subtype="PCM_16")
    return path


def test_moshi_is_registered_and_loads_small_on_the_cpu() -> None:
    assert "moshi" in family_keys()
    face = family("moshi")
    loaded = face.load(
        ModelRequest(device="cpu", model_size="small", arm=Arm.SR, seed=2),
        lambda stage, fraction: None,
    )
    model = loaded.model
    assert (model.period_s, model.input_rate, model.output_rate) == (0.08, 24_000, 24_000)
    assert loaded.has_text and loaded.weights_synthetic and loaded.replay.sealed
    assert loaded.warmup["arms"] == ["R", "Rc", "SR", "SRc"]
    rings = {"lm_kv": [3000], "depformer_kv": [8], "mimi_kv": [250]}  # moshi.yaml's capacities
    assert loaded.facts["rings"] == rings
    # every layer but each transformer's first (small: temporal 2, depformer 1, Mimi 2 + 2)
    assert loaded.facts["clock_followers"] == 3
    g = np.random.default_rng(3)
    steps = [model.step((0.2 * g.standard_normal(1920)).astype(np.float32)) for _ in range(6)]
    assert steps[0].audio == [] and all(len(s.audio) == 1 for s in steps[1:])
    assert all(s.audio[0].shape == (1920,) for s in steps[1:])
    assert any(s.text for s in steps) and all(len(s.facts["tokens"]) == 9 for s in steps)
    model.reset()
    assert model.step(np.zeros(1920, dtype=np.float32)).audio == [] and not model.in_turn


def test_converse_headless_with_moshi(
    tmp_path: Path, talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, trace = tmp_path / "it.wav", tmp_path / "t.json"
    argv = ["converse", "--family", "moshi", "--headless", "--input", str(talk_wav)]
    argv += ["--output", str(out), "--trace", str(trace), "--device", "cpu", "--quiet"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    periods = summary["periods"]
    seconds = soundfile.info(talk_wav).duration
    assert periods >= round(seconds / 0.08) and summary["model"].startswith("Moshi (small")
    audio, rate = soundfile.read(out, dtype="float32")
    assert rate == 24_000 and audio.size == periods * 1920 and np.abs(audio).max() > 0.01

    header, records = read_trace(trace.with_suffix(".jsonl"))
    assert header["period_s"] == 0.08 and header["input_rate"] == 24_000
    # How fast the frames are is a speed figure for bench/, not this test's (a fresh 2-core
    # machine gave p50 44-48 ms): the summary counts what the trace says.
    assert summary["over_budget"] == sum(r["over_budget"] for r in records)
    assert header["stages"] == ["encode", "lm", "decode", "frame"]
    said = [r["loop"].get("text", "") for r in records]
    assert len(records) == periods and sum(bool(s) for s in said) > periods // 2
    assert all(r["period_s"] == 0.08 for r in records)  # the live panel's budget line
    chrome = json.loads(trace.read_text())
    validate_chrome_trace(chrome)
    texts = [e["args"]["text"] for e in chrome["traceEvents"] if e.get("name") == "period"
             and "text" in e.get("args", {})]  # fmt: skip
    assert texts == [s for s in said if s]
    assert "loop.text" in trace.with_suffix(".csv").read_text().splitlines()[0]

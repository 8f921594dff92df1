"""``duplexcadence converse --headless --sessions N``: N conversations on one set of weights in
one process, each with its own output, trace and summary; bad combinations refused in one
line. Token2Wav's sessions run on one set of shared bindings (a later admission captures
nothing) and each equals itself alone in eager, bit for bit. CPU, the small Token2Wav family
(the engine's exactness per session is tests/test_multiplex.py's and
tests/test_shared_bindings.py's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import torch

from app.cli import main
from app.periods import _pcm16
from engine.arms import Arm
from tests.speech import conversation


@pytest.fixture(scope="module")
def talk_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    talk = conversation([0.3, "hello there", 0.5])
    return talk.write(tmp_path_factory.mktemp("talk") / "talk.wav")


def test_two_sessions_write_their_own_files(
    tmp_path: Path, talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["converse", "--headless", "--family", "synthetic", "--device", "cpu", "--quiet"]
    argv += ["--input", str(talk_wav), "--output", str(tmp_path / "out{i}.wav")]
    argv += ["--trace", str(tmp_path / "trace.json"), "--sessions", "2", "--seconds", "4"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert len(summary["sessions"]) == 2
    for i, session in enumerate(summary["sessions"]):
        assert session["periods"] == 4
        assert session["output"] == str(tmp_path / f"out{i}.wav")
        assert (tmp_path / f"trace.{i}.jsonl").is_file()
        assert soundfile.info(tmp_path / f"out{i}.wav").frames == 4 * 24_000


def test_sessions_on_a_device_is_one_line(
    talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["converse", "--headless", "--family", "synthetic", "--sessions", "2"]
    argv += ["--input", str(talk_wav), "--output-device", "default"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--sessions 2 runs on files" in err


# Session i hears TALKS[i]: different words at different times, so each turns and speaks when
# its own input says (and the others' periods interleave with its own on the shared bindings).
TALKS = [[0.3, "hello there", 0.5], [1.2, "good morning", 0.3], [0.1, "what time is it", 0.2]]
PERIODS = 5


def write_talks(folder: Path) -> Path:
    """Each session's input, ``talk{i}.wav`` in ``folder``; returns the name with ``{i}``."""
    for i, segments in enumerate(TALKS):
        conversation(segments).write(folder / f"talk{i}.wav")
    return folder / "talk{i}.wav"


def alone_in_eager(
    run_seed: int, talks: Path, periods: int, device: str, model_size: str, name: str
) -> list[list[Any]]:
    """Each session alone in eager, one after the other: the run's weights and voice
    (``run_seed``'s), its own decoder under the stock path (its own streams, no bindings, no
    warm-up), its backbone and random stream from its seed (``run_seed + i``), its input's
    periods then silence; each session's period outcomes."""
    from dataclasses import replace

    from adapters.registry import family
    from app.periods import WavSource
    from app.session import open_session
    from app.settings import Settings
    from engine.multiplex import SessionRng

    settings = Settings(
        family=name, device=device, model_size=model_size, arm=Arm.EAGER, seed=run_seed
    )
    request = settings.model_request(realtime=False)
    face = family(name)
    source = face.load_sessions(request, lambda stage, fraction: None)
    sessions = []
    for i in range(len(TALKS)):
        seed = run_seed + i
        speech = source.speech(source.voice(run_seed), Arm.EAGER)
        loaded = face.loaded(speech, replace(request, seed=seed), {}, None)
        session = open_session(loaded, replace(settings, seed=seed), fresh=True)
        n_in = round(session.period_s * session.input_rate)
        wav = WavSource(talks.with_name(f"talk{i}.wav"), session.input_rate, realtime=False)
        outcomes = []
        with SessionRng(torch.device(device), seed).active():
            for _ in range(periods):
                mic = wav.read_period(n_in, timeout=1.0)
                outcomes.append(session.step(np.zeros(n_in, np.float32) if mic is None else mic))
        wav.close()
        session.close()
        sessions.append(outcomes)
    return sessions


def shared_sessions_equal_alone(
    folder: Path,
    capsys: pytest.CaptureFixture[str],
    device: str,
    model_size: str,
    name: str = "synthetic",
) -> None:
    """``converse --sessions 3`` (three inputs, one voice, seed 7) on one set of Token2Wav
    bindings: the first session captured them, the later admissions captured nothing (the
    trace's warm-up record and the summary line say so); every session's audio and
    per-period trace facts equal the same session run alone in eager, bit for bit."""
    talks = write_talks(folder)
    argv = ["converse", "--headless", "--family", name, "--quiet"]
    argv += ["--device", device, "--model-size", model_size]
    argv += ["--arm", "SRc", "--seed", "7", "--sessions", str(len(TALKS))]
    argv += ["--input", str(talks), "--output", str(folder / "out{i}.wav")]
    argv += ["--trace", str(folder / "trace.json"), "--seconds", str(PERIODS)]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    lines = summary["sessions"]
    assert summary["bindings"] == "shared"
    assert "captured them at its admission" in lines[0]["bindings"]
    for line in lines[1:]:
        assert line["bindings"].startswith("shared bindings")
        assert "this admission captured nothing" in line["bindings"]
    outs = [soundfile.read(folder / f"out{i}.wav", dtype="int16")[0] for i in range(len(TALKS))]
    assert not any(np.array_equal(outs[0], out) for out in outs[1:])  # each speaks its own
    alone = alone_in_eager(7, talks, PERIODS, device, model_size, name)
    for i, line in enumerate(lines):
        assert line["periods"] == PERIODS and line["speaking_periods"] > 0, line
        records = [json.loads(x) for x in (folder / f"trace.{i}.jsonl").read_text().splitlines()]
        warmup = records[0]["settings"]["warmup"]
        assert warmup["bindings"] == ("captured" if i == 0 else "shared")
        assert (warmup["captures"] > 0) == (i == 0) and (warmup["steps"] > 0) == (i == 0)
        periods = [r for r in records[1:] if "loop" in r]
        assert len(periods) == PERIODS

        want = np.concatenate([_pcm16(o.pcm) for o in alone[i]])
        assert np.array_equal(outs[i], want), f"session {i}: audio differs"
        for k, (record, outcome) in enumerate(zip(periods, alone[i], strict=True)):
            got, expected = record["loop"], outcome.record.loop
            for key in ("phase", "tokens", "turn_end", "barge_in", "calls", "out_peak"):
                assert got[key] == expected[key], (i, k, key)


@pytest.mark.parametrize("name", ["synthetic", "lycheefd"])
def test_sessions_on_shared_bindings_equal_each_alone_in_eager(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """MiniCPM-o's decoder (one call a speaking period) and Lychee-FD's (2 or 3 calls in one
    period: one span of the session on the lane, its state copied in once)."""
    shared_sessions_equal_alone(tmp_path, capsys, "cpu", "small", name)


def test_the_summary_says_how_a_session_holds_its_bindings() -> None:
    """The words of each way (Moshi's sessions capture their own: per-session)."""
    from app.sessions import bindings_words

    assert bindings_words({"bindings": "per-session", "captures": 12}).startswith(
        "per-session bindings: this session captured its own at its admission (12 graphs)"
    )
    assert "captured them at its admission (8 graphs)" in bindings_words(
        {"bindings": "captured", "captures": 8}
    )
    assert "this admission captured nothing" in bindings_words({"bindings": "shared"})


def test_moshi_sessions_keep_their_own_bindings(
    tmp_path: Path, talk_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Moshi's sessions each capture their own bindings, and their summary lines say so."""
    pytest.importorskip("moshi")
    argv = ["converse", "--headless", "--family", "moshi", "--device", "cpu", "--quiet"]
    argv += ["--input", str(talk_wav), "--output", str(tmp_path / "out{i}.wav")]
    argv += ["--trace", str(tmp_path / "trace.json"), "--sessions", "2", "--seconds", "3"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["bindings"] == "per-session"
    for i, line in enumerate(summary["sessions"]):
        assert line["bindings"].startswith("per-session bindings: this session captured its own")
        records = (tmp_path / f"trace.{i}.jsonl").read_text().splitlines()
        warmup = json.loads(records[0])["settings"]["warmup"]
        assert warmup["bindings"] == "per-session" and warmup["captures"] > 0


def test_sessions_run_on_a_settled_heap(
    tmp_path: Path, talk_wav: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once every session is admitted the heap is collected and frozen before the first period
    (a full collection walking the sessions' twins and graphs mid-period held the GIL for
    100-350 ms: late periods), and given back when the sessions close."""
    import gc

    import app.sessions

    frozen: list[int] = []
    run = app.sessions._run

    def counted(*args: Any) -> None:
        frozen.append(gc.get_freeze_count())
        run(*args)

    monkeypatch.setattr(app.sessions, "_run", counted)
    argv = ["converse", "--headless", "--family", "synthetic", "--device", "cpu", "--quiet"]
    argv += ["--input", str(talk_wav), "--output", str(tmp_path / "out{i}.wav")]
    argv += ["--sessions", "2", "--seconds", "2"]
    assert main(argv) == 0
    assert frozen and frozen[0] > 0
    assert gc.get_freeze_count() == 0

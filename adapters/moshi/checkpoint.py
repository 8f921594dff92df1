"""Build Moshi's two models: from a checkpoint folder or with seeded random weights.

The vendor's constructors (``moshi.models.loaders.get_moshi_lm``, ``get_mimi``) build the
architecture from the arguments :mod:`adapters.moshi.config` derives from the declaration; the
weights come from the folder's safetensors (the vendor's own loading: its key renames and dtype
casts) or from :func:`adapters.weights.randomize_` (every parameter and every codebook, never
zeros). Nothing here asks the hub: files are local paths; config.json is read, never fetched.

Errors are one line (:class:`~adapters.moshi.config.CheckpointError`): a file the vendor cannot
read, a tensor missing or of the wrong shape, a tokenizer smaller than the model's text
vocabulary, and, before anything is allocated, a GPU without the memory the model needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from adapters.moshi.config import WORKSPACE_BYTES, CheckpointError, FolderFiles, MoshiSize
from adapters.weights import randomize_
from engine.sizes import byte_text

__all__ = ["MoshiModels", "Vocabulary", "build_models", "memory_needed"]


class Vocabulary:
    """Text token -> the piece the assistant says; the padding tokens say nothing.

    With the checkpoint's sentencepiece model the piece is its text (``▁`` a space); seeded
    random weights have no vocabulary, so a piece is the token's number, ``<id>``.
    """

    def __init__(self, silent: tuple[int, ...], tokenizer: Any | None = None) -> None:
        self.silent, self.tokenizer = frozenset(silent), tokenizer

    def piece(self, token: int) -> str:
        if token in self.silent or token < 0:
            return ""
        if self.tokenizer is None:
            return f" <{token}>"
        text: str = self.tokenizer.id_to_piece(token)
        return text.replace("\u2581", " ")


@dataclass
class MoshiModels:
    """The codec, the LM and its vocabulary, on one device, in eval mode."""

    mimi: Any  # moshi.models.compression.MimiModel
    lm: Any  # moshi.models.lm.LMModel
    vocab: Vocabulary
    sampling: dict[str, Any]  # LMGen arguments the checkpoint's config.json sets
    synthetic: bool  # seeded random weights


def _dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA (the released weights' dtype), float32 on the CPU (bf16 is slow there)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def build_models(
    size: MoshiSize,
    files: FolderFiles | None,
    device: torch.device,
    seed: int,
    *,
    lm_kwargs: dict[str, Any] | None = None,
    load_lm: Callable[..., Any] | None = None,
) -> MoshiModels:
    """The folder's models (``files``) or seeded random ones at ``size``.

    ``lm_kwargs``: the LM's arguments (default: the size's over the vendor's 7B or the folder's
    config.json); ``load_lm(path, lm_kwargs, device=, dtype=)``: how the folder's LM loads
    (default: the vendor's ``get_moshi_lm``)."""
    from moshi.models import loaders

    dtype = _dtype(device)
    if lm_kwargs is None:
        lm_kwargs = size.lm_kwargs(loaders._lm_kwargs, files.lm_kwargs if files else None)
    mimi_config = size.mimi_config(loaders._mimi_config, files.mimi_config if files else None)
    audio_q = size.point["audio_q"]
    if files is not None:  # a config that does not fit its weights is told before the memory
        _check_fits(files.moshi, lm_kwargs, dtype)
    check_memory(device, memory_needed(size, lm_kwargs, dtype))
    if files is None:
        lm = loaders.get_moshi_lm(None, lm_kwargs, device=device, dtype=dtype)
        randomize_(lm, seed, on_device=device.type == "cuda")
        mimi = loaders.get_mimi(None, mimi_config, device=device, num_codebooks=audio_q)
        _randomize_codec_(mimi, seed + 1)
        silent = (lm.text_padding_token_id, lm.end_of_text_padding_id)
        return MoshiModels(mimi, lm, Vocabulary(silent), {}, synthetic=True)
    lm = _load(
        files.moshi,
        load_lm or loaders.get_moshi_lm,
        files.moshi,
        lm_kwargs,
        device=device,
        dtype=dtype,
    )
    mimi = _load(
        files.mimi, loaders.get_mimi, files.mimi, mimi_config, device=device, num_codebooks=audio_q
    )
    tokenizer = _tokenizer(files.tokenizer, lm.text_card)
    silent = (lm.text_padding_token_id, lm.end_of_text_padding_id)
    return MoshiModels(mimi, lm, Vocabulary(silent, tokenizer), files.lm_gen, synthetic=False)


def _load(path: Path, build: Any, *args: Any, **kwargs: Any) -> Any:
    """``build(*args)`` with the vendor's loading errors turned into one line naming ``path``."""
    from safetensors import SafetensorError

    try:
        return build(*args, **kwargs)
    except (RuntimeError, ValueError, OSError, KeyError, SafetensorError) as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = next((line for line in lines if "size mismatch" in line), None)
        detail = detail or (lines[1] if len(lines) > 1 else lines[0] if lines else repr(error))
        if len(detail) > 160:
            detail = detail[:157] + "..."
        raise CheckpointError(f"{path.name} does not fit the Moshi config: {detail}") from None


def _tokenizer(path: Path, text_card: int) -> Any:
    import sentencepiece

    try:
        tokenizer = sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as error:
        raise CheckpointError(f"{path.name} is not a sentencepiece model: {error}") from None
    if tokenizer.get_piece_size() < text_card:
        raise CheckpointError(
            f"{path.name} has {tokenizer.get_piece_size()} pieces, but the model speaks "
            f"{text_card} text tokens: use the tokenizer of the same checkpoint"
        )
    return tokenizer


@torch.no_grad()
def _randomize_codec_(mimi: nn.Module, seed: int) -> None:
    """Every parameter, and every quantizer codebook (buffers, zeros at construction)."""
    randomize_(mimi, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    for module in mimi.modules():
        codebook = getattr(module, "embedding_sum", None)
        if isinstance(codebook, torch.Tensor):
            values = torch.randn(codebook.shape, generator=generator, dtype=torch.float64)
            codebook.copy_(values.to(codebook.dtype))
            module.register_buffer("_embedding", None, persistent=False)


def _meta_lm(lm_kwargs: dict[str, Any], dtype: torch.dtype) -> Any:
    """The LM ``lm_kwargs`` builds, on the meta device: shapes without memory."""
    from moshi.models.lm import LMModel

    with torch.device("meta"):
        return LMModel(device="meta", dtype=dtype, **lm_kwargs)


def _check_fits(path: Path, lm_kwargs: dict[str, Any], dtype: torch.dtype) -> None:
    """A CheckpointError naming the first tensor whose shape in ``path`` (its safetensors
    header) differs from the one the config builds; torch loads nothing."""
    from adapters.safetensors_header import read_header

    stored = read_header(path)
    for name, parameter in _meta_lm(lm_kwargs, dtype).state_dict().items():
        entry = stored.get(name)
        if entry is not None and tuple(entry.shape) != tuple(parameter.shape):
            raise CheckpointError(
                f"{path.name} does not fit the Moshi config: size mismatch for {name}: the file "
                f"holds {list(entry.shape)}, the config builds {list(parameter.shape)}"
            )


def memory_needed(size: MoshiSize, lm_kwargs: dict[str, Any], dtype: torch.dtype) -> int:
    """Bytes the model needs on its device: LM weights, its rings, Mimi, a workspace."""
    lm = _meta_lm(lm_kwargs, dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    weights = sum(p.numel() for p in lm.parameters()) * itemsize
    # The temporal rings at the sizes built (a checkpoint's config.json may be smaller than
    # the declaration's 7B, never larger): layers x (key, value) x capacity x width.
    ring: int = lm_kwargs["num_layers"] * 2 * lm_kwargs["context"] * lm_kwargs["dim"] * itemsize
    mimi = 100 * 1024 * 1024 if size.name == "full" else 0  # 79 M float32 parameters
    return int(weights + ring + mimi + WORKSPACE_BYTES)


def check_memory(device: torch.device, needed: int) -> None:
    """A one-line error, before anything is allocated, when ``device`` lacks ``needed`` bytes:
    the GPU's free memory on CUDA, the host's available memory on the CPU (float32 there: the
    full 7B needs about 30 GB)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        where = f"GPU memory in bf16, but {device} has"
        fix = "close other programs on the GPU, or pick another device"
    else:
        from adapters.host_memory import host_room

        free, bound = host_room()  # the least of the machine's, ulimit -v's and the cgroup's
        where = f"host memory in float32 on the CPU, but {bound}"
        fix = "close other programs, use a CUDA GPU, or set the model size to small"
    if free < needed:
        raise CheckpointError(
            f"Moshi needs about {byte_text(needed)} of {where} {byte_text(free)} free: {fix}"
        )

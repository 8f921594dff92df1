"""Which voice and which role a PersonaPlex conversation is prompted with.

A voice is named by the user (``--voice``, Settings) as one of the checkpoint folder's voices
(``NATF2``), a stored voice file (``NAME.pt``, loaded as tensors only: ``weights_only``), or a
recording (any file ``soundfile`` reads: mixed to mono, resampled to the model's rate, brought to
-24 LUFS as PersonaPlex does, cut into frames, the last one padded with silence). Without one,
the folder's :data:`DEFAULT_VOICE`; seeded random weights have no voices, so they get
:data:`SEEDED_VOICE_FRAMES` frames of seeded noise as a recording.

A role is one of :data:`ROLES` by name or free text, wrapped in ``<system>`` tags as PersonaPlex
does and tokenized with the checkpoint's tokenizer. Seeded random weights have no tokenizer: each
word becomes one stand-in token (its CRC-32 into the text vocabulary), which keeps a role's
length about what the tokenizer gives.
"""

from __future__ import annotations

import io
import zlib
from pathlib import Path
from typing import Any

import torch

from adapters.face import FamilyError
from adapters.personaplex.config import (
    DEFAULT_ROLE,
    DEFAULT_VOICE,
    MAX_VOICE_S,
    MIN_VOICE_S,
    ROLES,
    PersonaPlexFiles,
    read_voice_member,
)
from adapters.personaplex.prompt import Role, Voice

__all__ = [
    "DEFAULT_ROLE",
    "DEFAULT_VOICE",
    "MAX_VOICE_S",
    "ROLES",
    "SEEDED_VOICE_FRAMES",
    "resolve_role",
    "resolve_voice",
]

SEEDED_VOICE_FRAMES = 25  # 2 s of noise: seeded random weights' voice
TARGET_LUFS = -24.0  # PersonaPlex brings a recorded voice to this loudness
SYSTEM_TAG = "<system>"


def resolve_role(spec: str | None, tokenizer: Any | None, text_card: int) -> Role:
    """A preset by name, or ``spec`` as free text; ``None``/empty: :data:`DEFAULT_ROLE`."""
    spec = (spec or "").strip() or DEFAULT_ROLE
    name, text = (spec, ROLES[spec]) if spec in ROLES else ("custom", spec)
    wrapped = text if text.startswith(SYSTEM_TAG) and text.endswith(SYSTEM_TAG) else None
    wrapped = wrapped or f"{SYSTEM_TAG} {text} {SYSTEM_TAG}"
    if tokenizer is not None:
        tokens = tuple(int(t) for t in tokenizer.encode(wrapped))
    else:
        tokens = tuple(4 + zlib.crc32(w.encode()) % (text_card - 4) for w in wrapped.split())
    return Role(name, text, tokens)


def resolve_voice(
    spec: Path | None,
    files: PersonaPlexFiles | None,
    *,
    seed: int,
    rate: int,
    spf: int,
    dim: int,
    cache_shape: tuple[int, ...],
) -> Voice:
    """The voice ``spec`` names (see the module docstring), checked; one-line errors."""
    if spec is None:
        if files is None:
            g = torch.Generator().manual_seed(seed + 17)
            pcm = 0.1 * torch.randn((1, 1, SEEDED_VOICE_FRAMES * spf), generator=g)
            return Voice("seeded noise", pcm=pcm)
        if not files.voices:
            raise FamilyError(
                f"PersonaPlex folder {files.folder} has no voices (voices.tgz): download it, or "
                "pick a recording as the voice",
                "voice",
            )
        spec = Path(DEFAULT_VOICE if DEFAULT_VOICE in files.voices else next(iter(files.voices)))
    if spec.is_file():
        if spec.suffix == ".pt":
            return stored_voice(spec.stem, spec.read_bytes(), dim=dim, cache_shape=cache_shape)
        return recorded_voice(spec, rate=rate, spf=spf)
    name = str(spec)
    if files is not None and name in files.voices:
        data = read_voice_member(files, name)
        return stored_voice(name, data, dim=dim, cache_shape=cache_shape)
    offered = ", ".join(files.voices) if files is not None and files.voices else "none"
    raise FamilyError(
        f"voice {name!r} is neither a file nor one of the folder's voices ({offered}): pick a "
        "voice by name, or a recording",
        "voice",
    )


def stored_voice(name: str, data: bytes, *, dim: int, cache_shape: tuple[int, ...]) -> Voice:
    """A stored voice (PersonaPlex's ``NAME.pt``), loaded as tensors only and checked."""
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # the unpickler raises many kinds; any is "not a voice file"
        raise FamilyError(f"voice {name}: not a stored voice ({error})", "voice") from None
    embeddings = state.get("embeddings") if isinstance(state, dict) else None
    cache = state.get("cache") if isinstance(state, dict) else None
    if not isinstance(embeddings, torch.Tensor) or not isinstance(cache, torch.Tensor):
        raise FamilyError(
            f"voice {name}: a stored voice holds tensors 'embeddings' and 'cache'", "voice"
        )
    if embeddings.dim() != 4 or tuple(embeddings.shape[1:]) != (1, 1, dim) or not len(embeddings):
        raise FamilyError(
            f"voice {name}: embeddings of shape {tuple(embeddings.shape)}, but this model takes "
            f"(N, 1, 1, {dim}): use a voice of the same checkpoint",
            "voice",
        )
    if tuple(cache.shape) != cache_shape or cache.dtype != torch.long:
        raise FamilyError(
            f"voice {name}: a cache of shape {tuple(cache.shape)} ({cache.dtype}), but this model "
            f"keeps {cache_shape} (int64): use a voice of the same checkpoint",
            "voice",
        )
    return Voice(name, embeddings=embeddings, cache=cache)


def recorded_voice(path: Path, *, rate: int, spf: int) -> Voice:
    """A recording as PersonaPlex prompts with one: mono, at ``rate``, -24 LUFS, whole frames."""
    import numpy as np
    import pyloudnorm
    import soundfile
    import soxr

    try:
        audio, source_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (OSError, RuntimeError) as error:
        raise FamilyError(f"voice {path}: not a readable recording ({error})", "voice") from None
    seconds = len(audio) / source_rate
    if not MIN_VOICE_S <= seconds <= MAX_VOICE_S:
        raise FamilyError(
            f"voice {path}: {seconds:.1f} s long; a voice recording takes {MIN_VOICE_S:g} to "
            f"{MAX_VOICE_S:g} s",
            "voice",
        )
    mono = audio.mean(axis=1)
    if source_rate != rate:
        mono = soxr.resample(mono, source_rate, rate)
    loudness = pyloudnorm.Meter(rate).integrated_loudness(mono)
    if not np.isfinite(loudness):
        raise FamilyError(f"voice {path}: the recording is silent", "voice")
    mono = pyloudnorm.normalize.loudness(mono, loudness, TARGET_LUFS).astype(np.float32)
    frames = -(-len(mono) // spf)
    pcm = np.zeros(frames * spf, dtype=np.float32)
    pcm[: len(mono)] = mono
    return Voice(path.name, pcm=torch.from_numpy(pcm).view(1, 1, -1))

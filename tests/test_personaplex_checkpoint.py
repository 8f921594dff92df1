"""PersonaPlex's checkpoint folder, its voices and role, and the LM's widened depformer: checked
before anything loads, one line naming the fix.

The released weights and voices are gated (nvidia/personaplex-7b-v1): the folders here are
written by the tests, in its layout (Moshi's files, ``voices.tgz`` of ``NAME.pt`` tensors), and a
stored voice's tensors are seeded stand-ins of the released shapes.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from safetensors.torch import save_file

from adapters.face import FamilyError, ModelRequest
from adapters.moshi.config import MIMI_FILE, MOSHI_FILE, TOKENIZER_FILE, CheckpointError
from adapters.personaplex.checkpoint import load_lm, widen_depformer
from adapters.personaplex.config import check_folder
from adapters.personaplex.family import PERSONAPLEX
from adapters.personaplex.voice import (
    DEFAULT_VOICE,
    ROLES,
    recorded_voice,
    resolve_role,
    resolve_voice,
    stored_voice,
)
from adapters.safetensors_header import read_header
from tests.personaplex_small import DECLARATION, models

CACHE = (1, 17, 4)


def _voice_bytes(dim: int = 64, frames: int = 3) -> bytes:
    buffer = io.BytesIO()
    g = torch.Generator().manual_seed(0)
    state = {"embeddings": torch.randn((frames, 1, 1, dim), generator=g),
             "cache": torch.randint(0, 2048, CACHE, generator=g)}  # fmt: skip
    torch.save(state, buffer)
    return buffer.getvalue()


def _folder(tmp_path: Path, voices: tuple[str, ...] = ("NATF2", "VARM0")) -> Path:
    folder = tmp_path / "personaplex-7b-v1"
    folder.mkdir()
    save_file({"w": torch.zeros(2)}, folder / MOSHI_FILE)
    save_file({"w": torch.zeros(2)}, folder / MIMI_FILE)
    (folder / TOKENIZER_FILE).write_bytes(b"sentencepiece")
    with tarfile.open(folder / "voices.tgz", "w:gz") as tar:
        for name in voices:
            data = _voice_bytes()
            info = tarfile.TarInfo(f"voices/{name}.pt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return folder


def test_a_folder_lists_its_voices_from_the_archive(tmp_path: Path) -> None:
    files = check_folder(_folder(tmp_path))
    assert sorted(files.voices) == ["NATF2", "VARM0"]
    voice = resolve_voice(None, files, seed=0, rate=24000, spf=1920, dim=64, cache_shape=CACHE)
    assert voice.name == DEFAULT_VOICE and voice.embeddings is not None
    assert voice.embeddings.shape == (3, 1, 1, 64)


@pytest.mark.parametrize("missing", [MOSHI_FILE, MIMI_FILE, TOKENIZER_FILE])
def test_a_missing_file_is_named_with_the_fix(tmp_path: Path, missing: str) -> None:
    folder = _folder(tmp_path)
    (folder / missing).unlink()
    with pytest.raises(FamilyError) as caught:
        PERSONAPLEX.check(ModelRequest(checkpoint=folder, model_size="full"))
    assert missing in str(caught.value) and "nvidia/personaplex-7b-v1" in str(caught.value)
    assert caught.value.setting == "checkpoint"


def test_a_cut_weights_file_is_caught_before_loading(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    data = (folder / MOSHI_FILE).read_bytes()
    (folder / MOSHI_FILE).write_bytes(data[:-4])
    with pytest.raises(FamilyError, match="download it again"):
        PERSONAPLEX.check(ModelRequest(checkpoint=folder, model_size="full"))


def test_an_unknown_voice_and_the_small_size_are_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    with pytest.raises(FamilyError) as caught:
        PERSONAPLEX.check(ModelRequest(checkpoint=folder, model_size="full", voice=Path("NATM9")))
    assert "NATF2, VARM0" in str(caught.value) and caught.value.setting == "voice"
    with pytest.raises(FamilyError) as small:
        PERSONAPLEX.check(ModelRequest(checkpoint=folder, model_size="small"))
    assert small.value.setting == "model_size"
    PERSONAPLEX.check(ModelRequest(checkpoint=folder, model_size="full", voice=Path("VARM0")))


def test_a_stored_voice_loads_tensors_only(tmp_path: Path) -> None:
    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("code from a voice file ran",))

    buffer = io.BytesIO()
    torch.save({"embeddings": Payload(), "cache": torch.zeros(CACHE, dtype=torch.long)}, buffer)
    with pytest.raises(FamilyError, match="not a stored voice"):
        stored_voice("evil", buffer.getvalue(), dim=64, cache_shape=CACHE)
    with pytest.raises(FamilyError, match=r"\(N, 1, 1, 32\): use a voice of the same checkpoint"):
        stored_voice("other", _voice_bytes(dim=64), dim=32, cache_shape=CACHE)


def test_a_recording_is_mono_whole_frames_at_24_lufs(tmp_path: Path) -> None:
    import pyloudnorm

    rate = 16000
    t = np.arange(int(1.3 * rate)) / rate
    tone = 0.05 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    path = tmp_path / "me.wav"
    soundfile.write(path, np.stack([tone, 0.5 * tone], axis=1), rate)
    voice = recorded_voice(path, rate=24000, spf=1920)
    assert voice.pcm is not None and voice.pcm.shape[-1] % 1920 == 0
    assert voice.pcm.shape[-1] // 1920 == -(-int(1.3 * 24000) // 1920)
    pcm = voice.pcm.flatten().numpy()[: int(1.3 * 24000)]
    assert pyloudnorm.Meter(24000).integrated_loudness(pcm) == pytest.approx(-24.0, abs=0.2)
    soundfile.write(path, tone[: rate // 4], rate)
    with pytest.raises(FamilyError, match=r"0\.5 to 30 s"):
        recorded_voice(path, rate=24000, spf=1920)


def test_roles_are_presets_or_free_text_wrapped_in_system_tags() -> None:
    preset = resolve_role("casual", None, 32000)
    assert preset.name == "casual" and preset.text == ROLES["casual"]
    assert len(preset.tokens) == len(f"<system> {ROLES['casual']} <system>".split())
    free = resolve_role("You sell bicycles.", None, 32000)
    assert free.name == "custom" and free.tokens[0] == free.tokens[-1]  # the two tags
    assert resolve_role(None, None, 32000).name == "assistant"


def _released_form(lm: torch.nn.Module, steps: int) -> dict[str, torch.Tensor]:
    """The LM's state as a checkpoint of a depformer for ``steps`` steps stores it: per-step
    projections stacked (``in_proj_weight``), later steps' per-step modules absent."""
    import re

    state: dict[str, torch.Tensor] = {}
    stacked: dict[str, list[torch.Tensor]] = {}
    for name, tensor in lm.state_dict().items():
        found = re.search(r"(in_projs|out_projs)\.(\d+)\.weight$", name)
        if found and name.startswith("depformer."):
            if int(found.group(2)) < steps:
                legacy = "in_proj_weight" if found.group(1) == "in_projs" else "out_proj.weight"
                stacked.setdefault(name[: found.start()] + legacy, []).append(tensor)
            continue
        step = re.search(r"(gating|linears|depformer_in|depformer_emb)\.(\d+)\.", name)
        if step and int(step.group(2)) >= steps:
            continue
        state[name] = tensor.contiguous()
    return state | {k: torch.cat(v).contiguous() for k, v in stacked.items()}


def test_an_eight_step_depformer_is_widened_as_personaplex_loads_it(tmp_path: Path) -> None:
    from moshi.models import loaders

    from adapters.personaplex.config import lm_kwargs, size_for

    lm = models().lm
    path = tmp_path / MOSHI_FILE
    save_file(_released_form(lm, 8), path)
    read_header(path)
    kwargs = lm_kwargs(size_for("small", DECLARATION), loaders._lm_kwargs)
    loaded = load_lm(path, kwargs, device=torch.device("cpu"), dtype=torch.float32)
    ours = loaded.state_dict()
    layer = "depformer.layers.0"
    for i in range(8):
        for part in ("self_attn.in_projs", "self_attn.out_projs"):
            assert torch.equal(
                ours[f"{layer}.{part}.{8 + i}.weight"], ours[f"{layer}.{part}.{i}.weight"]
            )
        assert torch.equal(ours[f"linears.{8 + i}.weight"], lm.state_dict()[f"linears.{i}.weight"])
    assert torch.equal(ours["depformer_emb.8.weight"], lm.state_dict()["depformer_emb.0.weight"])
    assert (
        widen_depformer(_released_form(lm, 8), loaded) == 8 * 2 + 8 + 8 + 7 + 2
    )  # gating in/out, linears, in, emb, stacked
    state = _released_form(lm, 8)
    del state["out_norm.alpha"]
    save_file(state, path)
    with pytest.raises(CheckpointError, match=r"lacks 1 tensors .* out_norm\.alpha"):
        load_lm(path, kwargs, device=torch.device("cpu"), dtype=torch.float32)

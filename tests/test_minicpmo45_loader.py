"""Loading the checkpoint's code: what we ask of transformers, and the one-line errors.

``transformers.AutoModel`` answers with :class:`tests.minicpmo45_standin.StandInModel` (the one
fake, at the model's boundary: what the folder's code would build), so the checks run without
transformers or weights: the local-only, bf16, vision-off request; the vendor's ``init_tts``
shadowed while ``as_duplex`` runs and restored after; failures of the user's code as one line.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from adapters.face import FamilyError
from adapters.minicpmo45.folder import check_folder
from adapters.minicpmo45.loader import LoadFacts, load_duplex
from tests.minicpmo45_standin import LISTEN, StandInDuplex, StandInModel
from tests.test_minicpmo45_folder import make_folder


def _transformers(monkeypatch: pytest.MonkeyPatch, from_pretrained: Any) -> None:
    auto = types.SimpleNamespace(from_pretrained=from_pretrained)
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(AutoModel=auto))


def test_the_folder_loads_local_only_in_bf16_without_vision_or_the_vendor_token2wav(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = check_folder(make_folder(tmp_path / "ckpt"))
    built: list[StandInModel] = []

    def from_pretrained(path: str, **kwargs: Any) -> StandInModel:
        built.append(StandInModel([LISTEN], path=path, **kwargs))
        return built[-1]

    _transformers(monkeypatch, from_pretrained)
    facts = LoadFacts(transformers="4.51.0")
    duplex = load_duplex(folder, "cpu", facts)
    model = built[0]
    assert isinstance(duplex, StandInDuplex)
    assert model.loaded_with == {
        "path": str(folder.path),
        "trust_remote_code": True,
        "torch_dtype": torch.bfloat16,
        "init_vision": False,
        "init_audio": True,
        "init_tts": True,
        "local_files_only": True,
        "use_safetensors": True,
        "attn_implementation": "sdpa",
    }
    assert model.devices == ["cpu"]
    assert model.duplex_kwargs == {
        "device": "cpu", "generate_audio": True, "ls_mode": "explicit", "chunk_ms": 1000,
    }  # fmt: skip
    assert facts.vendor_tts_skipped == 1 and model.init_tts_calls == 0
    assert "init_tts" not in vars(model)  # the shadow is gone: the method is the model's again
    model.init_tts()
    assert model.init_tts_calls == 1


@pytest.mark.parametrize(
    ("failure", "words", "setting"),
    [
        (ImportError("requires flag_gems"), "pip install 'duplexcadence[minicpmo45]'", None),
        (KeyError("tts_config"), "failed to load the model (KeyError: 'tts_config')", "checkpoint"),
        (RuntimeError("CUDA out of memory.\nTried"), "RuntimeError: CUDA out of", "checkpoint"),
    ],
)
def test_the_users_code_failing_is_one_line_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    failure: Exception,
    words: str,
    setting: str | None,
) -> None:
    folder = check_folder(make_folder(tmp_path / "ckpt"))

    def from_pretrained(path: str, **kwargs: Any) -> StandInModel:
        raise failure

    _transformers(monkeypatch, from_pretrained)
    with pytest.raises(FamilyError, match=re.escape(words)) as caught:
        load_duplex(folder, "cpu", LoadFacts(transformers="4.51.0"))
    assert "\n" not in str(caught.value) and caught.value.setting == setting


def test_code_without_as_duplex_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = check_folder(make_folder(tmp_path / "ckpt"))

    class WithoutDuplex(StandInModel):
        as_duplex = None  # type: ignore[assignment]

    _transformers(monkeypatch, lambda path, **kwargs: WithoutDuplex([LISTEN]))
    with pytest.raises(FamilyError, match=r"no as_duplex\(\)"):
        load_duplex(folder, "cpu", LoadFacts(transformers="4.51.0"))

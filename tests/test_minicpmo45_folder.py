"""The minicpmo45 family's checks before anything loads: folder, consent, transformers, memory.

Torch-free checks on folders made here (a config, code files, safetensors headers); nothing of
the vendor's runs. The memory refusal is checked with ``torch.cuda.mem_get_info`` answering for
a GPU this machine does not have (the machine's boundary, patched).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from adapters.face import FamilyError, ModelRequest
from adapters.minicpmo45.family import MINICPMO45
from adapters.minicpmo45.folder import check_folder, weight_bytes
from adapters.minicpmo45.loader import TRANSFORMERS_PIN, check_memory, check_transformers
from adapters.registry import family
from app.cli import main
from app.settings import Settings, SettingsError, check_settings

CODE = ("configuration_minicpmo.py", "modeling_minicpmo.py")


def make_folder(root: Path, *, config: dict[str, object] | None = None) -> Path:
    """A checkpoint folder as released, in miniature: config, code files, one safetensors."""
    root.mkdir(parents=True, exist_ok=True)
    base = {
        "model_type": "minicpmo",
        "auto_map": {
            "AutoConfig": "configuration_minicpmo.MiniCPMOConfig",
            "AutoModel": "modeling_minicpmo.MiniCPMO",
        },
    }
    (root / "config.json").write_text(json.dumps(config if config is not None else base))
    for name in CODE:
        (root / name).write_text("# the checkpoint's model code\n")
    tensors = {
        "llm.lm_head.weight": torch.zeros(10, 4, dtype=torch.float32),  # 40 floats -> 80 bytes
        "apm.conv.weight": torch.zeros(3, dtype=torch.bfloat16),  # 6 bytes
        "vpm.patch.weight": torch.zeros(100, dtype=torch.float32),  # vision: left out
        "tts.steps": torch.zeros(2, dtype=torch.int64),  # 16 bytes as stored
    }
    save_file(tensors, str(root / "model.safetensors"))
    return root


def request(folder: Path | None, **changes: object) -> ModelRequest:
    fields: dict[str, object] = {"checkpoint": folder, "trust_checkpoint_code": True}
    return ModelRequest(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_released_folder_passes_and_its_weights_count_in_bf16_without_vision(
    tmp_path: Path,
) -> None:
    folder = check_folder(make_folder(tmp_path / "ckpt"))
    assert folder.code == CODE
    assert weight_bytes(folder) == 80 + 6 + 16
    assert folder.token2wav == tmp_path / "ckpt" / "assets" / "token2wav"


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda p: (p / "config.json").unlink(), "lacks config.json"),
        (lambda p: (p / "config.json").write_text("{"), "cannot be read"),
        (lambda p: (p / "config.json").write_text('{"model_type": "qwen3"}'), "not 'minicpmo'"),
        (lambda p: (p / "config.json").write_text('{"model_type": "minicpmo"}'), "no auto_map"),
        (lambda p: (p / "modeling_minicpmo.py").unlink(), "lacks modeling_minicpmo.py"),
        (lambda p: (p / "model.safetensors").unlink(), "no safetensors weights"),
        (lambda p: (p / "model.safetensors").write_bytes(b"\x01"), "not a readable safetensors"),
    ],
)
def test_a_damaged_folder_is_refused_naming_what_is_wrong(
    tmp_path: Path, damage: object, words: str
) -> None:
    path = make_folder(tmp_path / "ckpt")
    damage(path)  # type: ignore[operator]
    with pytest.raises(FamilyError, match=words) as caught:
        weight_bytes(check_folder(path))
    assert caught.value.setting == "checkpoint"


def test_pickled_weights_and_hub_code_are_refused(tmp_path: Path) -> None:
    path = make_folder(tmp_path / "ckpt")
    (path / "model.safetensors").unlink()
    (path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(FamilyError, match=r"pytorch_model.bin is a pickle"):
        check_folder(path)
    hub = {"model_type": "minicpmo", "auto_map": {"AutoModel": "someone/repo--modeling.M"}}
    with pytest.raises(FamilyError, match="hub repository; only code inside the folder runs"):
        check_folder(make_folder(tmp_path / "hub", config=hub))


def test_sharded_weights_need_every_shard_the_index_names(tmp_path: Path) -> None:
    path = make_folder(tmp_path / "ckpt")
    (path / "model.safetensors").rename(path / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002.st"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FamilyError, match="lacks 1 weight file"):
        check_folder(path)


def test_the_folders_code_runs_only_with_consent_naming_the_flag_and_the_checkbox(
    tmp_path: Path,
) -> None:
    path = make_folder(tmp_path / "ckpt")
    with pytest.raises(FamilyError) as caught:
        MINICPMO45.check(request(path, trust_checkpoint_code=False))
    message = str(caught.value)
    assert "--trust-checkpoint-code" in message and "Run the checkpoint's own code" in message
    assert "modeling_minicpmo.py" in message
    assert caught.value.setting == "trust_checkpoint_code"
    MINICPMO45.check(request(path))  # small decoder: needs no token2wav folder


def test_requests_the_family_cannot_serve_name_the_setting(tmp_path: Path) -> None:
    path = make_folder(tmp_path / "ckpt")
    with pytest.raises(FamilyError, match="needs its checkpoint folder") as caught:
        MINICPMO45.check(request(None))
    assert caught.value.setting == "checkpoint"
    with pytest.raises(FamilyError, match="token2wav") as caught:
        MINICPMO45.check(request(path, model_size="full"))  # no assets/token2wav
    voice = tmp_path / "me.wav"
    with pytest.raises(FamilyError, match="set the model size to full") as caught:
        MINICPMO45.check(request(path, voice=voice))
    assert caught.value.setting == "voice"


def test_the_registry_and_the_settings_offer_it_and_check_consent(tmp_path: Path) -> None:
    assert family("minicpmo45") is MINICPMO45
    path = make_folder(tmp_path / "ckpt")
    # The stand-in folder has no assets/token2wav: the small random decoder speaks.
    settings = Settings(family="minicpmo45", checkpoint=path, device="cpu", model_size="small")
    with pytest.raises(SettingsError, match="--trust-checkpoint-code"):
        check_settings(settings)
    trusted = Settings.from_dict({**settings.to_dict(), "trust_checkpoint_code": True})
    check_settings(trusted)
    assert trusted.model_request().trust_checkpoint_code


def test_converse_refuses_without_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np
    import soundfile

    path = make_folder(tmp_path / "ckpt")
    soundfile.write(str(tmp_path / "me.wav"), np.zeros(16000, dtype=np.float32), 16000)
    argv = ["converse", "--headless", "--device", "cpu", "--family", "minicpmo45"]
    argv += ["--checkpoint", str(path), "--input", str(tmp_path / "me.wav")]
    argv += ["--output", str(tmp_path / "o.wav"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--trust-checkpoint-code" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("version", "words"),
    [
        ("5.24.0", "transformers 5 removed modules"),
        ("4.57.1", "written and checked for 4.51 only"),
    ],
)
def test_transformers_other_than_the_pin_are_refused_with_why(version: str, words: str) -> None:
    with pytest.raises(FamilyError, match=words) as caught:
        check_transformers(version)
    assert TRANSFORMERS_PIN in str(caught.value)
    assert "duplexcadence[minicpmo45]" in str(caught.value)
    assert check_transformers("4.51.3") == "4.51.3"


def test_the_pin_is_the_projects_optional_extra() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["minicpmo45"]
    assert f"transformers=={TRANSFORMERS_PIN}" in extra


def test_too_little_free_gpu_memory_is_refused_with_needed_and_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (12 * gib, 80 * gib))
    with pytest.raises(FamilyError) as caught:
        check_memory("cuda:0", 19 * gib, "weights and decoder")
    message = str(caught.value)
    assert "12.0 GiB free of 80.0 GiB" in message and "about 19.0 GiB" in message
    assert caught.value.setting == "device"
    assert check_memory("cuda:0", 11 * gib, "x") == {"free_gib": 12.0, "total_gib": 80.0}
    assert check_memory("cpu", 10**15, "x") == {}

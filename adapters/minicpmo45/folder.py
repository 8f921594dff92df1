"""A MiniCPM-o 4.5 checkpoint folder, checked before anything loads (torch-free).

The model's code is not a package: it ships inside the checkpoint folder as remote code
(``config.json`` names it in ``auto_map``; ``modeling_minicpmo.py`` and friends, written for
transformers 4.51). :func:`check_folder` reads only files: the config, the code files it names,
the weights (safetensors only: a folder of ``.bin`` files is refused, we never unpickle) and the
Token2Wav folder ``assets/token2wav`` our decoder loads at full size. :func:`weight_bytes` reads
the safetensors headers (JSON) to tell how much GPU memory the model's weights take in bf16 with
the vision tower left out, without loading a tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.face import FamilyError
from adapters.hub_folder import config as read_config
from adapters.hub_folder import header, inside, shards

__all__ = [
    "MODEL_TYPE",
    "TOKEN2WAV_FOLDER",
    "VISION_PREFIXES",
    "CheckpointFolder",
    "check_folder",
    "weight_bytes",
]

MODEL_TYPE = "minicpmo"  # config.json's model_type
TOKEN2WAV_FOLDER = Path("assets") / "token2wav"  # the vendor's Token2wav files, read by ours
VISION_PREFIXES = ("vpm.", "resampler.")  # the vision tower's weights: not loaded (vision off)
_BF16 = 2  # bytes per floating-point weight once loaded in bf16
_FLOATS = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}
_SIZES.update({"BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1})


@dataclass(frozen=True)
class CheckpointFolder:
    """What the folder holds, as read from its files."""

    path: Path
    code: tuple[str, ...]  # the model-code files config.json's auto_map names
    shards: tuple[Path, ...]  # the safetensors files holding the weights

    @property
    def token2wav(self) -> Path:
        return self.path / TOKEN2WAV_FOLDER


def check_folder(path: Path) -> CheckpointFolder:
    """The folder's config, code and weights, or a :class:`FamilyError` naming what is wrong."""
    if not path.is_dir():
        problem = "is not a folder" if path.exists() else "does not exist"
        raise FamilyError(
            f"checkpoint {path} {problem}: choose the MiniCPM-o-4_5 folder (config.json, "
            "modeling_minicpmo.py, model*.safetensors)",
            "checkpoint",
        )
    config = read_config(path, "choose the MiniCPM-o-4_5 folder")
    if config.get("model_type") != MODEL_TYPE:
        raise FamilyError(
            f"checkpoint {path}: config.json has model_type {config.get('model_type')!r}, not "
            f"{MODEL_TYPE!r}: choose the MiniCPM-o-4_5 folder",
            "checkpoint",
        )
    code = _code_files(path, config)
    return CheckpointFolder(path, code, shards(path))


def weight_bytes(folder: CheckpointFolder, skip: tuple[str, ...] = VISION_PREFIXES) -> int:
    """Bytes the weights take once loaded in bf16 (floating tensors at 2 bytes, others as
    stored), leaving out tensors whose names start with ``skip``; read from the headers only."""
    total = 0
    for shard in folder.shards:
        for name, entry in header(shard).items():
            if not name.startswith(skip):
                size = _BF16 if entry.dtype in _FLOATS else _SIZES.get(entry.dtype, 8)
                total += math.prod(entry.shape) * size
    return total


def _code_files(path: Path, config: dict[str, Any]) -> tuple[str, ...]:
    """The files ``auto_map`` names for AutoConfig and AutoModel, which must be in the folder."""
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict) or "AutoModel" not in auto_map:
        raise FamilyError(
            f"checkpoint {path}: config.json has no auto_map.AutoModel, so the folder ships no "
            "model code: choose the MiniCPM-o-4_5 folder as released",
            "checkpoint",
        )
    names = []
    for key in ("AutoConfig", "AutoModel"):
        target = auto_map.get(key)
        if isinstance(target, str) and "--" in target:  # "owner/repo--module.Class": a hub repo
            raise FamilyError(
                f"checkpoint {path}: auto_map.{key} = {target!r} points at a hub repository; "
                "only code inside the folder runs: choose a folder that ships its code",
                "checkpoint",
            )
        if isinstance(target, str):
            names.append(target.rsplit(".", 1)[0] + ".py")
    missing = [name for name in names if not inside(path, name, "auto_map").is_file()]
    if missing:
        raise FamilyError(
            f"checkpoint {path} lacks {', '.join(missing)} (its config.json's auto_map names "
            "them): restore the model code files",
            "checkpoint",
        )
    return tuple(dict.fromkeys(names))

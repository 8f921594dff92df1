"""Moshi's configuration: the checkpoint folder and the model sizes, from the declaration.

Torch-free (the settings dialog checks a folder before anything loads), and it never asks the
hub: the folder alone says what to build.

A Kyutai folder (``kyutai/moshiko-pytorch-bf16``, moshika likewise) holds :data:`MOSHI_FILE`,
:data:`MIMI_FILE` and :data:`TOKENIZER_FILE` and no ``config.json``: the released 7B, whose
numbers are the vendor's built-in ones. A newer folder ships a ``config.json`` whose keys
``moshi_name, mimi_name, tokenizer_name, lm_gen_config, ...`` name files and defaults (popped,
as the vendor's ``CheckpointInfo.from_hf_repo`` does) and whose other keys are the LM's
arguments. Weights load from safetensors only.

The sizes are the declaration's operating point: ``full`` is it as declared (the released 7B +
Mimi), ``small`` overrides the layer and head counts (:data:`SMALL_POINT`) and shrinks what the
declaration does not state (:data:`SMALL_LM`, :data:`SMALL_MIMI`) so a frame runs in a few
milliseconds on one core. Both keep the declared frame (``samples_per_frame``), codebooks
(``dep_q``) and ring capacities: the state rule sizes the rings from the declaration, so a
config that disagrees with it is refused, never silently resized.

Every file is checked by its size and header before anything loads: an empty file, or a
safetensors file whose header is unreadable or whose tensors run past its end (an interrupted
download), is a :class:`DamagedFile`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.safetensors_header import Damaged, read_header
from engine.files_read import FileRefused, confined, read_json
from engine.sizes import GIB

if TYPE_CHECKING:
    from engine.contract import Declaration

__all__ = [
    "MIMI_FILE",
    "MOSHI_FILE",
    "TOKENIZER_FILE",
    "CheckpointError",
    "DamagedFile",
    "FolderFiles",
    "MoshiSize",
    "check_folder",
    "size_for",
]

MOSHI_FILE = "model.safetensors"
MIMI_FILE = "tokenizer-e351c8d8-checkpoint125.safetensors"
TOKENIZER_FILE = "tokenizer_spm_32k_3.model"
CONFIG_FILE = "config.json"
SIZES = ("full", "small")
WEIGHT_SUFFIXES = (".safetensors", ".sft")
WORKSPACE_BYTES = GIB  # activations, sampling and codec scratch beside weights and rings
MAX_UNDECLARED = 1 << 16  # a config number the declaration leaves open (the 7B's largest: 32,000)

#: The small size's operating point: the declared one with fewer, narrower layers.
SMALL_POINT = {
    "layers": 2,
    "heads": 4,
    "head_dim": 16,
    "dep_layers": 1,
    "dep_heads": 2,
    "dep_head_dim": 16,
    "mimi_layers": 2,
    "mimi_heads": 2,
    "mimi_head_dim": 32,
    "mimi_conv_values": 3030,  # the small codec's (SMALL_MIMI's filters and width)
    "position_bytes": 872,  # the small stream's counters, flags and small constants
}
#: The small LM's arguments the declaration does not state (feed-forward widths).
SMALL_LM = {"hidden_scale": 2, "depformer_dim_feedforward": 64}
#: The small Mimi's SEANet and quantizer widths (its frame, ratios and codebooks are the 7B's).
SMALL_MIMI = {"seanet_filters": 8, "quantizer_dimension": 32, "transformer_feedforward": 128}


class CheckpointError(ValueError):
    """A Moshi checkpoint folder, file, config value or tensor we cannot load (one line)."""


class DamagedFile(CheckpointError):
    """A checkpoint file that is empty, unreadable or cut short: the fix is to download it."""


@dataclass(frozen=True)
class FolderFiles:
    """A checkpoint folder's files and what its ``config.json`` says (empty for a legacy 7B)."""

    folder: Path
    moshi: Path
    mimi: Path
    tokenizer: Path
    lm_kwargs: dict[str, Any] | None  # None: the vendor's built-in 7B arguments
    lm_gen: dict[str, Any] = field(default_factory=dict)  # sampling defaults from config.json
    mimi_config: dict[str, Any] | None = None  # the file config.json's mimi_config_name names


def check_folder(folder: Path) -> FolderFiles:
    """The folder's files, or a :class:`CheckpointError` naming what is missing or wrong."""
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise CheckpointError(
            f"Moshi folder {folder} {problem}; it must contain {MOSHI_FILE}, {MIMI_FILE} "
            f"and {TOKENIZER_FILE}"
        )
    config_path = _inside(folder, CONFIG_FILE, CONFIG_FILE)
    lm_kwargs: dict[str, Any] | None = None
    lm_gen: dict[str, Any] = {}
    mimi_config: dict[str, Any] | None = None
    names = {"moshi_name": MOSHI_FILE, "mimi_name": MIMI_FILE, "tokenizer_name": TOKENIZER_FILE}
    if config_path.exists():
        lm_kwargs = _json(config_path)
        for key in names:
            names[key] = str(lm_kwargs.pop(key, names[key]))
        lm_gen = dict(lm_kwargs.pop("lm_gen_config", {}) or {})
        model_type = lm_kwargs.pop("model_type", "moshi")
        for key in ("tts_config", "stt_config", "model_id"):
            lm_kwargs.pop(key, None)
        mimi_name = lm_kwargs.pop("mimi_config_name", None)
        if mimi_name is not None:
            mimi_config = _json(_inside(folder, str(mimi_name), "mimi_config_name"))
        unsupported = [k for k in ("lora_name", "conditioners", "fuser") if lm_kwargs.get(k)]
        if model_type != "moshi" or unsupported:
            what = f"model_type {model_type!r}" if model_type != "moshi" else unsupported[0]
            raise CheckpointError(
                f"{config_path} describes a {what} model; only plain Moshi checkpoints "
                "(moshiko, moshika) are supported"
            )
    files = {key: _inside(folder, name, key) for key, name in names.items()}
    missing = [path.name for path in files.values() if not path.is_file()]
    if missing:
        raise CheckpointError(f"Moshi folder {folder} lacks {', '.join(missing)}")
    for key in ("moshi_name", "mimi_name"):
        if files[key].suffix not in WEIGHT_SUFFIXES:
            raise CheckpointError(
                f"{files[key]} is not a safetensors file; only safetensors weights are loaded"
            )
    for path in files.values():
        damage = damaged(path)
        if damage:
            raise DamagedFile(f"Moshi file {path} {damage}")
    return FolderFiles(
        folder,
        files["moshi_name"],
        files["mimi_name"],
        files["tokenizer_name"],
        lm_kwargs,
        lm_gen,
        mimi_config,
    )


def damaged(path: Path) -> str | None:
    """What is wrong with a checkpoint file, read from its size and (weights) header, or None."""
    if path.suffix in WEIGHT_SUFFIXES:
        try:
            read_header(path)
        except Damaged as damage:
            return str(damage)
    elif path.stat().st_size == 0:
        return "is empty (0 bytes)"
    return None


def _inside(folder: Path, name: str, key: str) -> Path:
    """The file ``name`` (``config.json``'s ``key``) inside ``folder``, or a CheckpointError."""
    what = key if key == CONFIG_FILE else f"{CONFIG_FILE}'s {key}"
    try:
        return confined(folder, name, what)
    except FileRefused as error:
        raise CheckpointError(f"Moshi folder: {error}: fix {what}") from None


def _json(path: Path) -> dict[str, Any]:
    try:
        raw = read_json(path)
    except FileRefused as error:
        raise CheckpointError(f"{error}: restore the checkpoint's file") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return dict(raw)


@dataclass(frozen=True)
class MoshiSize:
    """One model size: the operating point and the vendor constructor arguments built from it."""

    name: str
    point: dict[str, int]  # the declaration's operating point at this size

    def lm_kwargs(
        self, base: dict[str, Any], folder_kwargs: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The LM's arguments: ``folder_kwargs`` (a config.json) or ``base`` (the vendor's 7B)
        with the declared sizes; a config.json that disagrees with the declaration is refused."""
        p = self.point
        declared = {
            "dep_q": p["dep_q"],
            "context": p["main_capacity"],
            "num_layers": p["layers"],
            "num_heads": p["heads"],
            "dim": p["heads"] * p["head_dim"],
            "depformer_num_layers": p["dep_layers"],
            "depformer_num_heads": p["dep_heads"],
            "depformer_dim": p["dep_heads"] * p["dep_head_dim"],
        }
        if folder_kwargs is not None:
            kwargs = dict(folder_kwargs)
            _bounded_sizes(kwargs, declared, CONFIG_FILE)
            for key in ("dep_q", "context"):
                if key in kwargs and kwargs[key] != declared[key]:
                    raise CheckpointError(
                        f"config.json has {key}={kwargs[key]}, but the declaration bounds it at "
                        f"{declared[key]}: declare the checkpoint's value in moshi.yaml"
                    )
                kwargs[key] = declared[key]
            return kwargs
        kwargs = dict(base) | declared
        if self.name == "small":
            kwargs |= SMALL_LM
        if p["depformer_capacity"] != p["dep_q"]:
            raise CheckpointError(
                f"depformer_capacity {p['depformer_capacity']} != dep_q {p['dep_q']}: the "
                "depformer's ring holds one entry per codebook"
            )
        return kwargs

    def mimi_config(
        self, base: dict[str, Any], folder_config: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Mimi's config dicts: the folder's (its ring checked against the declaration), else
        the vendor's with the declared transformer and, small, the narrower SEANet and
        quantizer."""
        p = self.point
        if folder_config is not None:
            transformer = folder_config.get("transformer")
            if not isinstance(transformer, dict):
                raise CheckpointError("the Mimi config has no transformer section: restore it")
            _bounded_sizes(
                transformer,
                {
                    "num_layers": p["mimi_layers"],
                    "num_heads": p["mimi_heads"],
                    "d_model": p["mimi_heads"] * p["mimi_head_dim"],
                },
                "the Mimi config's transformer",
            )
            _bounded_sizes(folder_config.get("seanet") or {}, {}, "the Mimi config's seanet")
            _bounded_sizes(folder_config.get("quantizer") or {}, {}, "the Mimi config's quantizer")
            context = transformer.get("context")
            if context != p["mimi_capacity"]:
                raise CheckpointError(
                    f"the Mimi config has context={context}, but the declaration bounds it at "
                    f"mimi_capacity={p['mimi_capacity']}: declare the checkpoint's value in "
                    "moshi.yaml"
                )
            return folder_config
        config = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
        transformer = config["transformer"]
        transformer |= {
            "num_layers": p["mimi_layers"],
            "num_heads": p["mimi_heads"],
            "d_model": p["mimi_heads"] * p["mimi_head_dim"],
            "context": p["mimi_capacity"],
        }
        if self.name == "small":
            width = p["mimi_heads"] * p["mimi_head_dim"]
            config["seanet"] |= {"dimension": width, "n_filters": SMALL_MIMI["seanet_filters"]}
            config["quantizer"] |= {
                "dimension": SMALL_MIMI["quantizer_dimension"],
                "n_q": p["audio_q"],
                "input_dimension": width,
                "output_dimension": width,
            }
            transformer |= {
                "dim_feedforward": SMALL_MIMI["transformer_feedforward"],
                "input_dimension": width,
                "output_dimensions": [width],
            }
        return config


def _bounded_sizes(config: dict[str, Any], declared: dict[str, int], source: str) -> None:
    """Every number ``config`` (a checkpoint's) sets within its bound, before anything is built:
    a size the declaration states (``num_layers``, ``dim``, ...) from 1 to its declared value;
    any other number (a width, a vocabulary) finite and at most :data:`MAX_UNDECLARED`."""
    for key, value in config.items():
        bound = declared.get(key)
        if bound is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
                raise CheckpointError(
                    f"{source} has {key}={value!r}: expected an integer from 1 to {bound}, the "
                    "declaration's bound (moshi.yaml's operating point; declare a larger model "
                    "there)"
                )
        elif isinstance(value, int | float) and not abs(value) <= MAX_UNDECLARED:
            raise CheckpointError(
                f"{source} has {key}={value!r}: over the bound of {MAX_UNDECLARED:,} for a "
                "number moshi.yaml does not declare; restore the checkpoint's config"
            )


def size_for(
    name: str, declaration: Declaration, small_point: Mapping[str, int] = SMALL_POINT
) -> MoshiSize:
    """The size ``name`` (``full`` or ``small``) over the declaration's operating point; the
    small size is ``small_point`` over it (a family built on Moshi's code passes its own)."""
    if name not in SIZES:
        raise CheckpointError(f"model size {name!r}: expected one of {', '.join(SIZES)}")
    return MoshiSize(name, declaration.values(small_point if name == "small" else None))


def state_bytes(declaration: Declaration, size: MoshiSize) -> int:
    """One session's declared state at ``size``: every region of the declaration (the temporal
    transformer's rings, the depformer's and Mimi's), as its plan prices them, at the declared
    dtypes (CUDA's; on the CPU the LM's rings are float32, twice that). Every arm holds the
    same: the rings are the vendor's own, written in place at one address, so no arm stages a
    copy."""
    from engine.arms import Arm
    from engine.plan import make_plan

    return make_plan(declaration, size.point).price(Arm.SRC).state_bytes

"""The flow model's configuration: a vendor ``flow.yaml`` read safely into frozen dataclasses.

The checkpoint folder describes its flow model in hyperpyyaml syntax: ``!new:<dotted.Class>`` tags
build objects, ``!name:`` tags name callables, ``!apply:`` tags call functions and ``!ref <key>``
points at another value of the same file. We never execute any of that. A ``yaml.SafeLoader``
subclass turns every tagged node into an inert :class:`Tagged` record (tag kind, dotted target,
arguments), resolves plain ``!ref <dotted.key>`` references, and :func:`flow_config_from_yaml` then
reads the four records we know (flow, encoder, CFM, DiT) into dataclasses, refusing with a
:class:`CheckpointError` every value our implementation does not reproduce.

The dataclass defaults are the released MiniCPM-o 4.5 / Step-Audio2 values (FACTS.md), which the
random build uses when no checkpoint folder is given.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.files_read import FileRefused, confined
from engine.safe_yaml import BoundedLoader, YamlError, parse_yaml, read_yaml


class CheckpointError(ValueError):
    """A Token2Wav checkpoint folder, file, key, shape or config value we cannot load."""


REQUIRED_FILES = ("flow.yaml", "flow.pt", "hift_original.pt")


def check_folder(folder: Path) -> Path:
    """``folder`` if it holds every file of a token2wav checkpoint, else a CheckpointError that
    names what is missing (torch-free: settings validate a folder before anything loads)."""
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise CheckpointError(
            f"Token2Wav folder {folder} {problem}; it must contain {', '.join(REQUIRED_FILES)}"
        )
    for name in REQUIRED_FILES:  # never a symlink out of the folder, a FIFO or a device
        try:
            confined(folder, name, name)
        except FileRefused as error:
            raise CheckpointError(f"Token2Wav folder {folder}: {error}") from None
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(
            f"Token2Wav folder {folder} lacks {', '.join(missing)}; it must contain "
            f"{', '.join(REQUIRED_FILES)}"
        )
    for name in REQUIRED_FILES:
        damage = _damaged(folder / name)
        if damage:
            raise CheckpointError(
                f"checkpoint file {folder / name} {damage}: download the checkpoint again"
            )
    return folder


def _damaged(path: Path) -> str | None:
    """What is wrong with a checkpoint file, read from its size and header, or None.

    ``.pt`` files are torch's zip archives: a truncated one lacks the zip directory at its end
    (a legacy pickle, which has no such directory, is accepted when it starts like one)."""
    import zipfile

    size = path.stat().st_size
    if size == 0:
        return "is empty (0 bytes)"
    if path.suffix != ".pt":
        return None
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(b"\x80"):  # a legacy pickle protocol mark
        return None
    if head != b"PK\x03\x04":
        return f"is not a PyTorch checkpoint ({size} bytes that start like no archive)"
    if not zipfile.is_zipfile(path):
        return f"is truncated ({size} bytes, its archive's end is missing)"
    return None


@dataclass(frozen=True)
class Tagged:
    """An inert hyperpyyaml object node: ``kind`` is ``new``, ``name`` or ``apply``."""

    kind: str
    target: str
    args: Any


@dataclass(frozen=True)
class _Ref:
    path: str


FLOW_TAG = "cosyvoice2.flow.flow.CausalMaskedDiffWithXvec"
ENCODER_TAG = "cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2"
CFM_TAG = "cosyvoice2.flow.flow_matching.CausalConditionalCFM"
DIT_TAG = "cosyvoice2.flow.decoder_dit.DiT"


@dataclass(frozen=True)
class EncoderConfig:
    """``UpsampleConformerEncoderV2`` arguments that change the computation.

    Dropout rates are accepted and ignored: we only run inference (dropout is the identity).
    """

    input_size: int = 512
    output_size: int = 512
    pre_lookahead_len: int = 3
    num_blocks: int = 6
    num_up_blocks: int = 4
    up_stride: int = 2
    up_scale_factor: float = 2.0
    attention_heads: int = 8
    key_bias: bool = True
    linear_units: int = 2048


@dataclass(frozen=True)
class DiTConfig:
    """``DiT`` estimator arguments (``in_channels`` = x ‖ mu ‖ spk ‖ cond = 4 × 80)."""

    in_channels: int = 320
    out_channels: int = 80
    mlp_ratio: float = 4.0
    depth: int = 16
    num_heads: int = 8
    head_dim: int = 64
    hidden_size: int = 512


@dataclass(frozen=True)
class CFMConfig:
    """``CausalConditionalCFM`` arguments: classifier-free guidance rate and its estimator."""

    inference_cfg_rate: float = 0.7
    estimator: DiTConfig = field(default_factory=DiTConfig)


@dataclass(frozen=True)
class FlowConfig:
    """``CausalMaskedDiffWithXvec`` arguments with its encoder and decoder."""

    input_size: int = 512
    output_size: int = 80
    spk_embed_dim: int = 192
    vocab_size: int = 6561
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    decoder: CFMConfig = field(default_factory=CFMConfig)


# Values the code implements and nothing else: key -> the only accepted value.
_ENCODER_FIXED: dict[str, Any] = {
    "input_layer": "linear",
    "pos_enc_layer_type": "rel_pos_espnet",
    "selfattention_layer_type": "rel_selfattn",
    "normalize_before": True,
    "activation_type": "swish",
}
_ENCODER_IGNORED = ("dropout_rate", "positional_dropout_rate", "attention_dropout_rate")
_FLOW_FIXED: dict[str, Any] = {"output_type": "mel"}


class _FlowYamlLoader(BoundedLoader):
    """A bounded SafeLoader that reads hyperpyyaml tags as data and never imports or calls
    anything."""


def _construct_tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Tagged:
    kind, target = node.tag[1:].split(":", 1)
    args: Any
    if isinstance(node, yaml.MappingNode):
        args = loader.construct_mapping(node, deep=True)
    elif isinstance(node, yaml.SequenceNode):
        args = loader.construct_sequence(node, deep=True)
    else:
        args = loader.construct_scalar(node) or None  # type: ignore[arg-type]
    return Tagged(kind, target, args)


def _construct_ref(loader: yaml.SafeLoader, node: yaml.Node) -> _Ref:
    text = str(loader.construct_scalar(node)).strip()  # type: ignore[arg-type]
    match = re.fullmatch(r"<([\w.]+)>", text)
    if match is None:
        raise CheckpointError(
            f"flow.yaml: `!ref {text}` is not supported; only plain references `!ref <key>` "
            "(no arithmetic or string formatting) are read"
        )
    return _Ref(match.group(1))


for _kind in ("new", "name", "apply"):
    _FlowYamlLoader.add_multi_constructor(f"!{_kind}:", _construct_tagged)
_FlowYamlLoader.add_constructor("!ref", _construct_ref)


def load_flow_yaml(text: str, name: str = "flow.yaml") -> dict[str, Any]:
    """Parse hyperpyyaml text into plain data with :class:`Tagged` records, references resolved.

    The file comes from the internet: it is read within :mod:`engine.safe_yaml`'s size, depth and
    alias bounds, and the references it resolves share the same budget of values.
    """
    try:
        root = parse_yaml(text, name, loader=_FlowYamlLoader)
    except YamlError as error:
        raise CheckpointError(f"{error}; is this a Token2Wav checkpoint's flow.yaml?") from None
    return _resolved_root(root, name)


def _resolved_root(root: Any, name: str) -> dict[str, Any]:
    if not isinstance(root, dict):
        raise CheckpointError(f"{name} must be a mapping with a top-level `flow:` entry")
    resolved = _resolve(root, root, depth=0, budget=[_FlowYamlLoader.max_nodes])
    assert isinstance(resolved, dict)
    return resolved


def _resolve(value: Any, root: dict[str, Any], depth: int, budget: list[int]) -> Any:
    """``value`` with ``!ref``s replaced by copies; ``budget`` counts down the values made."""
    budget[0] -= 1
    if budget[0] < 0:
        raise CheckpointError(
            f"flow.yaml: `!ref` references expand to more than {_FlowYamlLoader.max_nodes} "
            "values (the bound); point them at plain values"
        )
    if depth > 32:
        raise CheckpointError("flow.yaml: `!ref` references form a cycle; point them at values")
    if isinstance(value, _Ref):
        return _resolve(_lookup(root, value.path), root, depth + 1, budget)
    if isinstance(value, Tagged):
        return dataclasses.replace(value, args=_resolve(value.args, root, depth, budget))
    if isinstance(value, dict):
        return {key: _resolve(item, root, depth, budget) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, root, depth, budget) for item in value]
    return value


def _lookup(root: dict[str, Any], path: str) -> Any:
    node: Any = root
    for part in path.split("."):
        args = node.args if isinstance(node, Tagged) else node
        if not isinstance(args, dict) or part not in args:
            raise CheckpointError(f"flow.yaml: `!ref <{path}>` names no value in the file")
        node = args[part]
    return node


def read_flow_config(path: Path) -> FlowConfig:
    """Read the ``flow.yaml`` at ``path`` within the YAML bounds (see
    :func:`flow_config_from_yaml`)."""
    try:
        root = read_yaml(path, loader=_FlowYamlLoader)
    except YamlError as error:
        raise CheckpointError(f"{error}; is this a Token2Wav checkpoint's flow.yaml?") from None
    try:
        return _flow_config(_resolved_root(root, str(path)))
    except CheckpointError as error:  # name the file the user must look at, not just its name
        raise CheckpointError(str(error).replace("flow.yaml", str(path), 1)) from None


def flow_config_from_yaml(text: str) -> FlowConfig:
    """Turn vendor ``flow.yaml`` text into a :class:`FlowConfig`.

    Only the ``flow`` entry is read (the file may carry other entries: sample rates, mel settings).
    Raises :class:`CheckpointError` naming the key, the value and what we support for a wrong tag,
    an unknown key, a missing required key, a value of the wrong type or an unsupported option,
    and every size outside ``(0, SIZE_FACTOR × the released value]``.
    """
    return _flow_config(load_flow_yaml(text))


def _flow_config(root: dict[str, Any]) -> FlowConfig:
    if "flow" not in root:
        raise CheckpointError("flow.yaml has no top-level `flow:` entry (the flow model's record)")
    flow = _fields(root["flow"], "flow", FLOW_TAG)
    encoder = _fields(flow.pop("encoder", None), "flow.encoder", ENCODER_TAG)
    decoder = _fields(flow.pop("decoder", None), "flow.decoder", CFM_TAG)
    estimator = _fields(decoder.pop("estimator", None), "flow.decoder.estimator", DIT_TAG)
    for key in _ENCODER_IGNORED:
        encoder.pop(key, None)
    _check_fixed(encoder, _ENCODER_FIXED, "flow.encoder")
    _check_fixed(flow, _FLOW_FIXED, "flow")
    return FlowConfig(
        **_typed(flow, FlowConfig, "flow", skip=("encoder", "decoder")),
        encoder=EncoderConfig(**_typed(encoder, EncoderConfig, "flow.encoder")),
        decoder=CFMConfig(
            **_typed(decoder, CFMConfig, "flow.decoder", skip=("estimator",)),
            estimator=DiTConfig(**_typed(estimator, DiTConfig, "flow.decoder.estimator")),
        ),
    )


def _fields(node: Any, where: str, tag: str) -> dict[str, Any]:
    if not isinstance(node, Tagged) or node.kind != "new" or node.target != tag:
        got = f"!{node.kind}:{node.target}" if isinstance(node, Tagged) else repr(node)
        raise CheckpointError(f"flow.yaml `{where}` is {got}; we support `!new:{tag}` only")
    if not isinstance(node.args, dict):
        raise CheckpointError(f"flow.yaml `{where}` must give its arguments as a mapping")
    return dict(node.args)


def _check_fixed(values: dict[str, Any], fixed: dict[str, Any], where: str) -> None:
    for key, supported in fixed.items():
        value = values.pop(key, supported)
        if value != supported:
            raise CheckpointError(
                f"flow.yaml `{where}.{key}` = {value!r} is not supported; we support {supported!r}"
            )


def _typed(
    values: dict[str, Any], schema: type, where: str, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Check ``values`` against ``schema``'s fields: no unknown keys, right scalar types."""
    known = {f.name: f for f in dataclasses.fields(schema) if f.name not in skip}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise CheckpointError(
            f"flow.yaml `{where}` has keys we do not implement: {unknown}; "
            f"we support {sorted(known)}"
        )
    out: dict[str, Any] = {}
    for key, value in values.items():
        default = getattr(schema(), key)
        out[key] = _coerce(value, default, f"{where}.{key}")
    return out


SIZE_FACTOR = 4
"""Every number in ``flow.yaml`` must lie in ``(0, SIZE_FACTOR × the released value]`` (the
dataclass defaults above), checked before a single block is built: the bound a checkpoint of
this family justifies. Four times the released depth and width is already a flow of ~16x the
released parameters with a stock cache envelope of several GB; a larger value is a broken or
hostile file (``depth: 100000`` would build blocks until memory runs out)."""


def _coerce(value: Any, released: Any, where: str) -> Any:
    kind = type(released)
    if kind is bool:
        if not isinstance(value, bool):
            raise CheckpointError(
                f"flow.yaml `{where}` = {value!r} is not supported; give true or false"
            )
        return value
    number = (kind is int and isinstance(value, int)) or (
        kind is float and isinstance(value, int | float)  # YAML may write 2 for 2.0
    )
    if not number or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise CheckpointError(
            f"flow.yaml `{where}` = {value!r} is not supported; "
            f"we support a positive, finite {kind.__name__}"
        )
    bound = SIZE_FACTOR * released
    if value > bound:
        raise CheckpointError(
            f"flow.yaml `{where}` = {value!r} exceeds the bound {bound} "
            f"({SIZE_FACTOR} x the released {released}); is this a Token2Wav flow.yaml?"
        )
    return kind(value)


SMALL_FLOW = FlowConfig(
    input_size=128,
    encoder=EncoderConfig(
        input_size=128,
        output_size=128,
        num_blocks=2,
        num_up_blocks=2,
        attention_heads=4,
        linear_units=256,
    ),
    decoder=CFMConfig(estimator=DiTConfig(depth=2, num_heads=2, head_dim=32, hidden_size=128)),
)
"""The real flow architecture at reduced width and depth (the ``small`` model size): the same
stream semantics, calls and caches at a cost two CPU cores keep up with in real time. Its
weights are always seeded random (no checkpoint has this shape)."""

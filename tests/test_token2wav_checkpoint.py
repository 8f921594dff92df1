"""Checkpoint folders in the real format (flow.yaml, torch.save'd state_dicts) load or fail clearly.

A reduced flow model (small widths and depths written into ``flow.yaml``) keeps this file fast on
the CPU; the reading code is the same for the released sizes (``test_token2wav_config`` reads
those, and the oracle tests load the full-size state_dict into the vendor's model).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from adapters.face import FamilyError, ModelRequest
from adapters.token2wav.checkpoint import (
    REQUIRED_FILES,
    CheckpointError,
    build_flow,
    load_token2wav,
)
from adapters.token2wav.config import CFMConfig, DiTConfig, EncoderConfig, FlowConfig
from adapters.token2wav.family import SYNTHETIC
from adapters.token2wav.hift import build_hift
from adapters.weights import randomize_

NOISE = "decoder.rand_noise"
SMALL = FlowConfig(
    input_size=64,
    encoder=EncoderConfig(
        input_size=64,
        output_size=64,
        num_blocks=1,
        num_up_blocks=1,
        attention_heads=8,
        linear_units=96,
    ),
    decoder=CFMConfig(estimator=DiTConfig(depth=2, num_heads=2, head_dim=32, hidden_size=64)),
)

SMALL_YAML = """\
__set_seed1: !apply:torch.manual_seed [1986]
flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec
    input_size: 64
    output_size: 80
    spk_embed_dim: 192
    output_type: 'mel'
    vocab_size: 6561
    encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2
        input_size: 64
        output_size: 64
        input_layer: 'linear'
        pre_lookahead_len: 3
        num_blocks: 1
        num_up_blocks: 1
        up_stride: 2
        up_scale_factor: 2
        attention_heads: 8
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        key_bias: true
        linear_units: 96
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: true
    decoder: !new:cosyvoice2.flow.flow_matching.CausalConditionalCFM
        inference_cfg_rate: 0.7
        estimator: !new:cosyvoice2.flow.decoder_dit.DiT
            in_channels: 320
            out_channels: 80
            mlp_ratio: 4.0
            depth: 2
            num_heads: 2
            head_dim: 32
            hidden_size: 64
"""


@pytest.fixture(scope="module")
def source() -> dict[str, torch.Tensor]:
    flow, _ = load_token2wav(None, seed=4, config=SMALL)
    return flow.state_dict()


@pytest.fixture(scope="module")
def hift_state() -> dict[str, torch.Tensor]:
    # The vendor's hift_original.pt prefixes every key with `generator.`.
    return {f"generator.{key}": value for key, value in build_hift(5).state_dict().items()}


def _write(
    folder: Path,
    flow_state: dict[str, torch.Tensor],
    hift_state: dict[str, torch.Tensor],
    yaml_text: str = SMALL_YAML,
) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "flow.yaml").write_text(yaml_text)
    torch.save(flow_state, folder / "flow.pt")
    torch.save(hift_state, folder / "hift_original.pt")
    return folder


def test_folder_round_trip(
    tmp_path: Path, source: dict[str, torch.Tensor], hift_state: dict[str, torch.Tensor]
) -> None:
    flow, hift = load_token2wav(_write(tmp_path / "t2w", source, hift_state), seed=4)
    loaded = flow.state_dict()
    assert loaded.keys() == source.keys()
    assert all(torch.equal(loaded[key], source[key]) for key in source)
    assert not flow.training and not hift.training
    loaded_hift = hift.state_dict()
    assert all(
        torch.equal(loaded_hift[key.removeprefix("generator.")], value)
        for key, value in hift_state.items()
    )


def test_random_build_is_a_function_of_the_seed() -> None:
    before = torch.random.get_rng_state()
    first, _ = load_token2wav(None, seed=9, config=SMALL)
    second, _ = load_token2wav(None, seed=9, config=SMALL)
    other = randomize_(build_flow(SMALL, seed=10), 10)
    assert torch.equal(torch.random.get_rng_state(), before), "a build must not move the global RNG"
    for (name, a), b, c in zip(
        first.state_dict().items(),
        second.state_dict().values(),
        other.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b), name
        assert not torch.equal(a, c), f"{name} ignores the seed"
    assert torch.equal(first.get_buffer(NOISE), second.get_buffer(NOISE))
    assert not torch.equal(first.get_buffer(NOISE), other.get_buffer(NOISE))


def test_missing_folder_and_files_are_named(
    tmp_path: Path, source: dict[str, torch.Tensor], hift_state: dict[str, torch.Tensor]
) -> None:
    with pytest.raises(
        CheckpointError, match=r"does not exist.*flow\.yaml, flow\.pt, hift_original\.pt"
    ):
        load_token2wav(tmp_path / "nowhere")
    folder = _write(tmp_path / "t2w", source, hift_state)
    for name in REQUIRED_FILES:
        (folder / name).rename(folder / f"{name}.away")
        with pytest.raises(CheckpointError, match=f"lacks {name}"):
            load_token2wav(folder)
        (folder / f"{name}.away").rename(folder / name)


def test_missing_and_unexpected_keys_are_listed(
    tmp_path: Path, source: dict[str, torch.Tensor], hift_state: dict[str, torch.Tensor]
) -> None:
    state = dict(source)
    state.pop("encoder.after_norm.weight")
    state["encoder.extra.weight"] = torch.zeros(1)
    with pytest.raises(
        CheckpointError, match=r"missing keys \[encoder.after_norm.weight\]"
    ) as error:
        load_token2wav(_write(tmp_path / "t2w", state, hift_state))
    assert "encoder.extra.weight" in str(error.value)


def test_shape_mismatch_names_key_expected_and_got(
    tmp_path: Path, source: dict[str, torch.Tensor], hift_state: dict[str, torch.Tensor]
) -> None:
    state = dict(source)
    state["encoder_proj.weight"] = torch.zeros(80, 32)
    with pytest.raises(
        CheckpointError, match=r"`encoder_proj.weight` has shape \(80, 32\).*\(80, 64\)"
    ):
        load_token2wav(_write(tmp_path / "t2w", state, hift_state))


def test_unsupported_yaml_value_is_a_checkpoint_error(
    tmp_path: Path, source: dict[str, torch.Tensor], hift_state: dict[str, torch.Tensor]
) -> None:
    folder = _write(
        tmp_path / "t2w", source, hift_state, SMALL_YAML.replace("'rel_selfattn'", "'selfattn'")
    )
    with pytest.raises(CheckpointError, match="selfattention_layer_type"):
        load_token2wav(folder)


def test_a_checkpoint_for_another_vocabulary_is_refused_at_load(
    tmp_path: Path, hift_state: dict[str, torch.Tensor]
) -> None:
    """The declaration states the vocabulary; weights for another tokenizer are named, not run."""
    other = dataclasses.replace(SMALL, vocab_size=100)
    flow, _ = load_token2wav(None, seed=4, config=other)
    yaml_text = SMALL_YAML.replace("vocab_size: 6561", "vocab_size: 100")
    folder = _write(tmp_path / "t2w", flow.state_dict(), hift_state, yaml_text)
    request = ModelRequest(model_size="full", checkpoint=folder, n_steps=2)
    with pytest.raises(FamilyError, match=r"100 speech tokens at 24000 Hz.*6561") as error:
        SYNTHETIC.load_speech(request, lambda stage, fraction: None)
    assert error.value.setting == "checkpoint"

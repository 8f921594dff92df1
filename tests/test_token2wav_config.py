"""``flow.yaml`` in the vendor's hyperpyyaml format reads into our frozen config, safely."""

from __future__ import annotations

import pytest

from adapters.token2wav.config import (
    CheckpointError,
    EncoderConfig,
    FlowConfig,
    Tagged,
    flow_config_from_yaml,
    load_flow_yaml,
)

# The released file's shape: seeding side effects and other entries beside `flow`, `!ref`s,
# quoted strings, `2` for a float. None of the tags may be executed by the reader.
FLOW_YAML = """\
# set random seed, so that you may reproduce your result.
__set_seed1: !apply:random.seed [1986]
__set_seed2: !apply:numpy.random.seed [1986]
__set_seed3: !apply:torch.manual_seed [1986]
__set_seed4: !apply:torch.cuda.manual_seed_all [1986]

sample_rate: 24000
spk_embed_dim: 192
token_mel_ratio: 2

flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec
    input_size: 512
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2
        input_size: 512
        output_size: 512
        input_layer: 'linear'
        pre_lookahead_len: 3
        num_blocks: 6
        num_up_blocks: 4
        up_stride: !ref <token_mel_ratio>
        up_scale_factor: 2
        attention_heads: 8
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        key_bias: true
        linear_units: 2048
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
            depth: 16
            num_heads: 8
            head_dim: 64
            hidden_size: 512

mel_spec: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    sampling_rate: !ref <sample_rate>
"""


def test_released_flow_yaml_gives_the_released_config() -> None:
    config = flow_config_from_yaml(FLOW_YAML)
    assert config == FlowConfig()
    assert config.encoder.up_stride == 2 and isinstance(config.encoder.up_scale_factor, float)


def test_tags_are_inert_records_and_refs_resolve() -> None:
    root = load_flow_yaml(FLOW_YAML)
    assert root["__set_seed3"] == Tagged("apply", "torch.manual_seed", [1986])
    assert root["mel_spec"].kind == "name" and root["mel_spec"].args["sampling_rate"] == 24000
    assert root["flow"].args["spk_embed_dim"] == 192


def test_config_is_frozen() -> None:
    with pytest.raises(AttributeError):
        FlowConfig().vocab_size = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("pos_enc_layer_type: 'rel_pos_espnet'", "pos_enc_layer_type: 'rel_pos'", "rel_pos"),
        ("normalize_before: true", "normalize_before: false", "normalize_before"),
        ("output_type: 'mel'", "output_type: 'linear'", "output_type"),
        ("num_blocks: 6", "num_blocks: 0", "num_blocks"),
        ("key_bias: true", "key_bias: 1", "key_bias"),
        ("linear_units: 2048", "linear_units: 2048\n        macaron_style: true", "macaron_style"),
        (
            "!new:cosyvoice2.flow.decoder_dit.DiT",
            "!new:cosyvoice2.flow.decoder.ConditionalDecoder",
            "ConditionalDecoder",
        ),
        ("spk_embed_dim: !ref <spk_embed_dim>", "spk_embed_dim: !ref <spk_dim> * 2", "!ref"),
        ("spk_embed_dim: !ref <spk_embed_dim>", "spk_embed_dim: !ref <nowhere>", "nowhere"),
    ],
)
def test_unsupported_values_name_key_value_and_support(old: str, new: str, names: str) -> None:
    assert old in FLOW_YAML, "fixture drifted"
    with pytest.raises(CheckpointError, match=r"flow\.yaml") as error:
        flow_config_from_yaml(FLOW_YAML.replace(old, new))
    assert names in str(error.value)


def test_missing_flow_entry_and_bad_yaml_are_checkpoint_errors() -> None:
    with pytest.raises(CheckpointError, match="`flow:`"):
        flow_config_from_yaml("sample_rate: 24000\n")
    with pytest.raises(CheckpointError, match="not valid YAML"):
        flow_config_from_yaml("flow: [unclosed\n")
    assert issubclass(CheckpointError, ValueError)


def test_reduced_sizes_are_accepted() -> None:
    text = FLOW_YAML.replace("num_blocks: 6", "num_blocks: 2").replace(
        "linear_units: 2048", "linear_units: 1024"
    )
    encoder = flow_config_from_yaml(text).encoder
    assert encoder == EncoderConfig(num_blocks=2, linear_units=1024)

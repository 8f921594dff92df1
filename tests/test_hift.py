"""HiFT build and checkpoint loading: seeds, strict key/shape checks, the vendor's key spellings.

Reduced width (base 32 channels) wherever a forward runs; the full-width architecture is compared
with the vendor in ``tests/oracle/test_oracle_hift.py``. CPU runtime: a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from adapters.token2wav.config import CheckpointError
from adapters.token2wav.hift import HiFTConfig, HiFTGenerator, build_hift, load_hift

SMALL = HiFTConfig(base_channels=32, f0_channels=32)


def _save(state: dict[str, torch.Tensor], path: Path) -> Path:
    torch.save(state, path)
    return path


def _assert_same_weights(a: HiFTGenerator, b: HiFTGenerator) -> None:
    left, right = a.state_dict(), b.state_dict()
    assert left.keys() == right.keys()
    assert all(torch.equal(left[key], right[key]) for key in left)


def test_build_is_a_function_of_the_seed_only() -> None:
    before = torch.get_rng_state()
    first, second, other = build_hift(5, SMALL), build_hift(5, SMALL), build_hift(6, SMALL)
    assert torch.equal(torch.get_rng_state(), before), "building must not move the global RNG"
    _assert_same_weights(first, second)
    assert not torch.equal(first.state_dict()["conv_pre.bias"], other.state_dict()["conv_pre.bias"])
    assert not first.training


def test_forward_shapes_and_source_cache_paste() -> None:
    model = build_hift(1, SMALL)
    mel = torch.randn(1, 80, 12)
    cache = torch.randn(1, 1, 3840)
    audio, source = model(mel, cache)
    assert audio.shape == (1, 480 * 12) and source.shape == (1, 1, 480 * 12)
    assert torch.equal(source[:, :, :3840], cache), "the cached source tail leads the new source"
    assert float(audio.abs().max()) <= float(torch.tensor(0.99)), "the output clamp is ±0.99"


def test_load_round_trip_with_the_vendors_prefix(tmp_path: Path) -> None:
    model = build_hift(2, SMALL)
    state = {f"generator.{key}": value for key, value in model.state_dict().items()}
    loaded = load_hift(_save(state, tmp_path / "hift_original.pt"), SMALL)
    _assert_same_weights(model, loaded)


def test_load_accepts_old_style_weight_norm_keys(tmp_path: Path) -> None:
    model = build_hift(3, SMALL)
    renamed = {
        key.replace("parametrizations.weight.original0", "weight_g").replace(
            "parametrizations.weight.original1", "weight_v"
        ): value
        for key, value in model.state_dict().items()
    }
    loaded = load_hift(_save(renamed, tmp_path / "hift.pt"), SMALL)
    _assert_same_weights(model, loaded)


def test_load_reports_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"hift_original\.pt"):
        load_hift(tmp_path / "absent.pt")


def test_load_reports_missing_and_unexpected_keys(tmp_path: Path) -> None:
    state = build_hift(4, SMALL).state_dict()
    del state["conv_pre.bias"]
    state["extra.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match=r"missing \[conv_pre.bias\].*extra.weight"):
        load_hift(_save(state, tmp_path / "bad.pt"), SMALL)


def test_load_reports_shape_mismatch(tmp_path: Path) -> None:
    state = build_hift(5, SMALL).state_dict()
    with pytest.raises(
        CheckpointError, match=r"shape mismatch for .*conv_pre.bias \(32,\) \(expected \(16,\)\)"
    ):
        load_hift(_save(state, tmp_path / "wide.pt"), HiFTConfig(base_channels=16))


def test_load_rejects_a_non_state_dict(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="state_dict"):
        load_hift(_save([torch.zeros(1)], tmp_path / "list.pt"))  # type: ignore[arg-type]


def test_istft_switch_validates_its_mode() -> None:
    model = build_hift(None, SMALL)
    model.set_istft("capturable")
    assert model.istft_mode == "capturable"
    with pytest.raises(ValueError, match="istft must be one of"):
        model.set_istft("cufft")  # type: ignore[arg-type]

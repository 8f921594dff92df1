"""The Models page lists every family of the registry (installed or not, where, size on disk,
what it needs, from the family's own footprint) and downloads Moshi, or the basic voice's larger
reply model, from its row, through a loopback stand-in for the hub, into a folder that then
passes the family's check."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch
from pytestqt.qtbot import QtBot
from safetensors.torch import save

from adapters.basic.folders import find_models
from adapters.moshi.config import MIMI_FILE, MOSHI_FILE, TOKENIZER_FILE
from adapters.registry import family, family_keys
from app.gui.settings.inventory import family_rows
from app.settings import Settings
from tests.default_family import basic_missing, basic_present
from tests.gui.test_gui_models import _Hub, gpu_here
from tests.test_basic_folders import LLAMA_TENSORS

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui


def test_every_family_is_listed_with_what_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    basic_present(monkeypatch)
    rows = {row.key: row for row in family_rows(Settings(), tmp_path / "models")}
    assert tuple(rows) == family_keys()
    for key, row in rows.items():
        assert row.title == family(key).title and row.needs  # the family's words, not ours
    assert rows["basic"].installed and rows["basic"].status == "ready"
    assert rows["basic"].size_bytes > 0 and rows["basic"].where
    assert not rows["moshi"].installed and "rings (its declaration)" in rows["moshi"].needs
    assert not rows["minicpmo45"].installed and "checkpoint folder" in rows["minicpmo45"].status
    downloadable = {k for k, row in rows.items() if row.download}
    assert downloadable == {"synthetic", "moshi", "minicpmo45", "basic"}
    assert rows["basic"].download and rows["basic"].download.repo_id == (
        "HuggingFaceTB/SmolLM2-1.7B-Instruct"  # its larger reply model, first of two
    )
    assert rows["moshi"].download and rows["moshi"].download.repo_id == (
        "kyutai/moshiko-pytorch-bf16"
    )
    assert rows["minicpmo45"].download and rows["minicpmo45"].download.repo_id == (
        "openbmb/MiniCPM-o-4_5"
    )
    basic_missing(monkeypatch)
    missing = family_rows(Settings(), tmp_path / "models")[family_keys().index("basic")]
    assert not missing.installed and "no_such_package_dc" in missing.status


@contextmanager
def _row_download(
    make_window: Callable[..., MainWindow],
    qtbot: QtBot,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    files: dict[str, bytes],
) -> Iterator[tuple[Any, Any, Path, bool]]:
    """Press ``key``'s Download on the Models page, the hub serving ``files`` (and one file
    not asked for): the settings dialog, the page, the folder handed back, and whether the row
    was installed before. The download is done when this yields."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    gpu_here(monkeypatch, True)  # one press downloads (without a GPU a second press would)
    hub = _Hub(family(key).downloads[0].repo_id, {**files, "README.md": b"not asked for"})
    try:
        window = make_window()
        settings = window.open_settings()
        settings.models_endpoint = hub.endpoint
        page = settings.open_models()
        page.folder.setText(str(tmp_path / "models"))
        page.refresh()
        assert page.table.rowCount() == len(family_keys())
        before = page.table.family_row(key).installed
        with qtbot.waitSignal(page.chosen, timeout=60_000) as chosen:
            page.table.buttons[key].click()
        yield settings, page, Path(chosen.args[0]), before
        qtbot.waitUntil(lambda: page.download.isEnabled(), timeout=10_000)
        page.reject()
        settings.reject()
    finally:
        hub.server.shutdown()


def test_moshi_downloads_from_its_row_and_becomes_the_family(
    make_window: Callable[..., MainWindow],
    qtbot: QtBot,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    weights = {MOSHI_FILE: 7_500, MIMI_FILE: 5_000}  # float32 values: 30,000 and 20,000 bytes
    files = {name: save({"w": torch.randn(n)}) for name, n in weights.items()}  # the real format
    files[TOKENIZER_FILE] = b"t" * 500
    row = _row_download(make_window, qtbot, tmp_path, monkeypatch, "moshi", files)
    with row as (settings, page, folder, before):
        assert not before
        assert folder == tmp_path / "models" / "moshiko-pytorch-bf16"
        assert sorted(p.name for p in folder.iterdir() if p.is_file()) == sorted(files)
        assert settings.family.currentData() == "moshi"
        assert settings.checkpoint.text() == str(folder)
        moshi = page.table.family_row("moshi")
        assert moshi.installed and moshi.where == (folder,) and moshi.size_bytes >= 50_500
        assert "GiB weights" in moshi.needs


def test_the_basic_voices_larger_model_downloads_into_the_folder_it_shares(
    make_window: Callable[..., MainWindow],
    qtbot: QtBot,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    basic_present(monkeypatch)
    config = {"model_type": "llama", "hidden_act": "silu"}  # the files' real formats, small
    files = {
        "config.json": json.dumps(config).encode(),
        "model.safetensors": save({name: torch.randn(100) for name in LLAMA_TENSORS}),
        "tokenizer.json": b"{}",
        "tokenizer_config.json": json.dumps({"chat_template": "{{ messages }}"}).encode(),
    }
    row = _row_download(make_window, qtbot, tmp_path, monkeypatch, "basic", files)
    with row as (settings, page, folder, before):
        assert before  # its own models: ready before
        assert folder == tmp_path / "models" / "basic-voice"  # the group, not the repository
        model = folder / "SmolLM2-1.7B-Instruct"
        assert sorted(p.name for p in model.iterdir() if p.is_file()) == sorted(files)
        assert find_models(folder).reply == model and find_models(folder).hearing is None
        assert settings.family.currentData() == "basic"
        assert settings.checkpoint.text() == str(folder)
        basic = page.table.family_row("basic")
        assert basic.installed and basic.where[0] == folder

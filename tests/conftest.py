"""Shared test setup: markers that skip cleanly where the hardware is absent."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (none here); results come from bench/")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny tensors: intra-op threads only add barrier waits (seconds on a loaded 2-core box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def release_frozen_heap() -> Iterator[None]:
    """Device streams and the app freeze the heap (app/heap.py) as they do in use; tests
    share one process, so each test gives its frozen objects back to the collector."""
    yield
    gc.unfreeze()

"""Fixtures the GPU tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts real graph launches: ``replays[0]``."""
    count = [0]
    original = torch.cuda.CUDAGraph.replay

    def counted(self: torch.cuda.CUDAGraph) -> None:
        count[0] += 1
        original(self)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", counted)
    yield count

"""The multiplexer on CUDA at the released shapes: sessions replaying concurrently on lanes (CUDA
streams), each with its own graph-safe generator state, equal each session alone in eager bit
for bit, across turn resets, turn ends and live arm switches (eager and S periods holding the
generator lock while the other sessions replay). Token2Wav's vocoder and Moshi's sampling draw
device randomness in every period, so a session drawing from another's stream would show.

Run with ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (``bench/run_gpu.sh`` sets it). Moshi's 7B takes
~16 GB and ~2 minutes here.
"""

from __future__ import annotations

import os

import pytest

from adapters.face import ModelRequest
from engine.arms import Arm
from tests.test_multiplex import moshi_sessions_equal_alone, token2wav_sessions_equal_alone

pytestmark = pytest.mark.gpu


def test_token2wav_sessions_on_lanes_equal_each_alone_in_eager() -> None:
    request = ModelRequest(device="cuda", model_size="full", arm=Arm.SRC, seed=0)
    token2wav_sessions_equal_alone(request, lanes=2)


def test_moshi_sessions_on_lanes_equal_each_alone_in_eager() -> None:
    request = ModelRequest(device="cuda", model_size="full", arm=Arm.SRC, seed=3)
    frames = int(os.environ.get("DUPLEXCADENCE_MULTIPLEX_FRAMES", "40"))
    moshi_sessions_equal_alone(request, lanes=2, frames=frames)

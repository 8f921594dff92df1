"""The full Token2Wav's host-memory check on the CPU, both of its steps.

What the declaration states (the stock envelope), the plan's price and the workspace are counted
before anything is built; a host with room for those is then checked against the modules' own
bytes, built on the meta device (weights and stock envelope). Here the host's room is set
between the two, so the first step passes and the second refuses with the whole count; the
first step's refusal under a real ``ulimit -v`` is ``tests/hostile/test_host_memory.py``'s.
"""

from __future__ import annotations

import re

import pytest

from adapters import host_memory
from adapters.face import FamilyError, ModelRequest
from adapters.token2wav.family import SYNTHETIC, _check_host
from adapters.token2wav.presets import preset
from engine.arms import Arm
from engine.sizes import GIB


def test_a_host_with_room_for_the_declared_part_is_checked_against_the_weights_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(host_memory, "host_room", lambda: (3 * GIB, "this machine has"))
    request = ModelRequest(device="cpu", model_size="full", arm=Arm.EAGER)
    with pytest.raises(FamilyError) as refused:
        _check_host(request, preset("full"), SYNTHETIC.declaration)
    words = str(refused.value)
    assert re.search(
        r"^Token2Wav \(full\) needs about 3\.\d GiB of host memory on the CPU \(2\.\d GiB weights "
        r"and stock envelope, 0\.0 GiB checkpoint files while loading, 0\.0 GiB state under "
        r"eager, 0\.5 GiB workspace\), but this machine has 3\.0 GiB: close other programs",
        words,
    ), words
    assert refused.value.setting == "device"

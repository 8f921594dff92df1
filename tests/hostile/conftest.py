"""The hostile suite's children are forked from zygotes (:mod:`tests.hostile.child`): started
once collection ends, when any test of the suite is to run, their imports, and the load of the
model the interrupted conversations share (:func:`tests.hostile.whole.converse_argv`'s), run
beside the first tests (in-process ones) instead of before the first child that needs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.child import prestart
from tests.hostile.whole import converse_argv

HERE = Path(__file__).parent
SHARING = {"test_interrupt.py", "test_interrupt_moments.py", "test_nothing_left.py"}  # its users


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    paths = {item.path for item in session.items if HERE in item.path.parents}
    if paths:
        sharing = any(path.name in SHARING for path in paths)
        prestart(shared=converse_argv(Path("run"), Path("talk.wav")) if sharing else None)

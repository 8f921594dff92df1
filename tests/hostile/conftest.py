"""The hostile suite's children are forked from zygotes (:mod:`tests.hostile.child`): started at
the suite's first test, their imports, and the load of the model the interrupted conversations
share (:func:`tests.hostile.whole.converse_argv`'s), run beside the first tests (in-process ones)
instead of before the first child that needs them. Not before the suite's first test: in a run
of the whole test tree they would load the CPU while other suites run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.child import prestart
from tests.hostile.whole import converse_argv

HERE = Path(__file__).parent
SHARING = {"test_interrupt.py", "test_interrupt_moments.py", "test_nothing_left.py"}  # its users
_started: list[bool] = []


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Called for this folder's tests only (a conftest's hook): the first one starts them."""
    if _started:
        return
    _started.append(True)
    paths = {i.path for i in item.session.items if HERE in i.path.parents}
    sharing = any(path.name in SHARING for path in paths)
    prestart(shared=converse_argv(Path("run"), Path("talk.wav")) if sharing else None)

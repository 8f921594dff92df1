"""The hostile suite's children are forked from zygotes (:mod:`tests.hostile.child`): started
once collection ends, when any test of the suite is to run, their imports run beside the first
tests (in-process ones) instead of before the first child."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.child import prestart

HERE = Path(__file__).parent


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(HERE in item.path.parents for item in session.items):
        prestart()

"""The basic voice's packages present or missing, whatever this machine has installed: the
default family's checks look them up by name (``adapters.basic.shipped``)."""

from __future__ import annotations

import pytest

from adapters.basic import shipped


def basic_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """One of the basic voice's packages is missing (a name no index holds)."""
    monkeypatch.setitem(shipped.MODULES, "no_such_package_dc", "no-such-package")


def basic_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every package of the basic voice counts as installed."""
    monkeypatch.setattr(shipped, "check_installed", lambda: None)

"""The one place the Moshi families touch the ``moshi`` package's classes: its version, checked,
and the subclasses that replace a vendor class on one object.

Our stream replaces a few of the vendor's methods on live objects (the clock's attention and
rings, :mod:`adapters.moshi.clock`; the streaming states that keep their tensors' addresses,
:mod:`adapters.moshi.stream`). Each replacement is written against the vendor's code of
:data:`VERIFIED` and proven bit-exact against it there, so both families (Moshi, PersonaPlex)
refuse any other ``moshi`` (:func:`require_verified`) with one line that names it and the fix.

:func:`replace_class` gives an object a subclass of its vendor class with some methods
replaced; the subclass is made once per (vendor class, role) and remembers the vendor class
(``vendor_class``), so replacing twice subclasses the vendor's class again, never ours.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

__all__ = ["VERIFIED", "VendorVersionError", "replace_class", "require_verified", "vendor_class"]

VERIFIED = "0.2.13"  # the moshi our replacements were proven bit-exact against

_SUBCLASSES: dict[tuple[type, str], type] = {}


class VendorVersionError(RuntimeError):
    """The installed ``moshi`` is not the one our code was verified on (one line, with the fix)."""


def require_verified(installed: str | None = None) -> None:
    """Raise :class:`VendorVersionError` unless ``moshi`` :data:`VERIFIED` is installed."""
    if installed is None:
        try:
            installed = metadata.version("moshi")
        except metadata.PackageNotFoundError:
            installed = None
    if installed != VERIFIED:
        found = f"moshi {installed} is installed" if installed else "moshi is not installed"
        raise VendorVersionError(
            f"{found}, but the Moshi families were verified on moshi {VERIFIED} only: "
            f"pip install --no-deps moshi=={VERIFIED}"
        )


def vendor_class(obj: Any) -> type:
    """The vendor's class of ``obj``, beneath any class :func:`replace_class` gave it."""
    return getattr(type(obj), "vendor_class", type(obj))


def replace_class(obj: Any, role: str, **methods: Any) -> None:
    """Make ``obj`` an instance of ``<Role><VendorClass>``: its vendor class with ``methods``
    replaced (built once per vendor class and role; the same ``methods`` each time)."""
    cls = vendor_class(obj)
    key = (cls, role)
    if key not in _SUBCLASSES:
        name = f"{role}{cls.__name__}"
        _SUBCLASSES[key] = type(name, (cls,), {"vendor_class": cls, **methods})
    obj.__class__ = _SUBCLASSES[key]

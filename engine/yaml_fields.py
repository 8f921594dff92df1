"""Reading one YAML mapping with errors that name the field's path, the value and the fix.

Used by :mod:`engine.declaration_io`; every failure is a ``DeclarationError`` whose message starts
with the dotted YAML path (``regions.estimator_att.retention.order``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from engine.contract import DeclarationError
from engine.expr import Expr, ExprError, parse_expr

REQUIRED: Any = object()


class Fields:
    """One YAML mapping being read: ``take`` each known key, then ``close`` rejects the rest."""

    def __init__(self, value: object, path: str) -> None:
        if not isinstance(value, Mapping):
            raise DeclarationError(f"{path or '<top>'}: expected a mapping, got {value!r}")
        self.value, self.path = value, path
        self.known: list[str] = []

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def take(self, key: str, default: Any = REQUIRED) -> Any:
        self.known.append(key)
        if key in self.value:
            return self.value[key]
        if default is REQUIRED:
            raise DeclarationError(f"{self.at(key)}: required field is missing; add it")
        return default

    def close(self) -> None:
        for key in self.value:
            if key not in self.known:
                raise DeclarationError(
                    f"{self.at(str(key))}: unknown key {key!r}; expected one of "
                    f"{', '.join(self.known)}"
                )


@contextmanager
def expr_errors(path: str) -> Iterator[None]:
    """Rewrap expression errors raised while reading ``path`` with that path."""
    try:
        yield
    except ExprError as error:
        raise DeclarationError(f"{path}: {error}") from None


def expr_field(value: object, path: str, names: frozenset[str]) -> Expr:
    """Parse an expression and check that it reads only ``names``."""
    with expr_errors(path):
        expr: Expr = parse_expr(value)
    unknown = sorted(expr.names() - names)
    if unknown:
        raise DeclarationError(
            f"{path}: unknown name {unknown[0]!r} in {expr.text!r}; expected one of "
            f"{', '.join(sorted(names))} (declare it under operating_point)"
        )
    return expr


def choice(value: object, path: str, options: list[str]) -> str:
    if value not in options:
        raise DeclarationError(f"{path}: got {value!r}; expected one of {', '.join(options)}")
    return str(value)


def typed(value: object, kind: type, path: str, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DeclarationError(f"{path}: got {value!r}; expected {what}")
    return value


def entries(value: object, path: str) -> dict[str, Any]:
    """A mapping of named entries (``regions``, ``operators``, ...)."""
    fields = Fields(value, path)
    for key in fields.value:
        if not isinstance(key, str) or not key.isidentifier():
            raise DeclarationError(f"{fields.at(str(key))}: names must be identifiers")
    return dict(fields.value)

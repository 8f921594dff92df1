"""Integer arithmetic and admission predicates for declarations, parsed without ``eval``.

Declarations write region extents and call sizes as expressions over operating-point names
(``f_prompt + f_retained + f_call``) and the admission predicate as structured YAML
(``{le: [f, f_chunk]}``). This module parses both into small immutable trees and evaluates them
on a mapping of names to integers.

Grammar (all arithmetic is on Python ``int``; there are no floats, calls or attributes)::

    expr   := term (('+' | '-') term)*
    term   := factor (('*' | '//') factor)*
    factor := INT | NAME | '(' expr ')' | '-' factor

Predicates are mappings with exactly one key: ``le lt ge gt eq ne`` take ``[expr, expr]``,
``all`` and ``any`` take a list of predicates, ``not`` takes one predicate and ``in`` takes
``[expr, [expr, ...]]``.

Bounds: an expression has at most :data:`MAX_TOKENS` tokens (which keeps the parser's and the
evaluator's recursion well below Python's limit) and nests parentheses at most
:data:`MAX_NESTING` deep: a declaration is data from anywhere, and 400 nested parentheses are an
error, not a ``RecursionError``. Every value an evaluation computes, intermediate ones included,
stays within :data:`MAX_LITERAL` in magnitude, whatever the names were given (a declaration, an
override): a product of absurd sizes is an error naming the expression, not a 3.9e79-MiB plan.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Union

MAX_TOKENS = 256  # the longest shipped expression has 9
MAX_LITERAL = 10**15  # an integer's magnitude, literal or evaluated; a size or count is far smaller
MAX_NESTING = 32  # parentheses; the deepest shipped expression nests 1
_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_]\w*)|(?P<op>//|[-+*()]))")


class ExprError(ValueError):
    """An expression or predicate that does not parse or names an unknown quantity.

    The loader rewraps it as a ``DeclarationError`` carrying the YAML path of the field.
    """


@dataclass(frozen=True)
class Num:
    value: int


@dataclass(frozen=True)
class Name:
    id: str


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Node
    right: Node


Node = Union[Num, Name, BinOp]  # noqa: UP007 (a runtime alias needs Union before 3.12's `type`)

_BINARY: dict[str, Callable[[int, int], int]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
}


@dataclass(frozen=True)
class Expr:
    """A parsed integer expression; ``text`` is kept verbatim for messages and reports."""

    text: str
    node: Node

    def names(self) -> frozenset[str]:
        """Every name the expression reads (checked against the declaration at load time)."""
        return _names(self.node)

    def evaluate(self, env: Mapping[str, int]) -> int:
        """The expression's value; raises ``ExprError`` naming any missing name."""
        return _evaluate(self.node, env, self.text)

    def interval(self, env: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
        """Bounds ``(low, high)`` of the value when each name ranges over its inclusive interval.

        Interval arithmetic: always encloses the true range, and is exact when every name
        appears once (``frames_per_token * tokens``), so a plan can bound a range of 10^9 calls
        without enumerating it. Raises ``ExprError`` when a divisor's interval holds zero.
        """
        return _interval(self.node, env, self.text)


def parse_expr(source: object) -> Expr:
    """Parse an int or an expression string; raises ``ExprError`` saying what was expected."""
    if isinstance(source, bool) or not isinstance(source, int | str):
        raise ExprError(f"expected an integer or an expression string, got {source!r}")
    if isinstance(source, int):
        return Expr(str(source), Num(_literal(source, str(source))))
    tokens = _tokenize(source)
    if len(tokens) > MAX_TOKENS:
        raise ExprError(
            f"expression {source[:40]!r}... has {len(tokens)} tokens, over the bound "
            f"{MAX_TOKENS}: name intermediate values in operating_point"
        )
    _check_nesting(tokens, source)
    node, rest = _parse_sum(tokens, source)
    if rest:
        raise ExprError(f"unexpected {rest[0]!r} in expression {source!r}")
    return Expr(source.strip(), node)


def _tokenize(source: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    text = source.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            bad = text[position:].strip()[:1]
            raise ExprError(
                f"unexpected {bad!r} in expression {source!r}: use integers, names, "
                "+ - * // and parentheses"
            )
        tokens.append(match.group(match.lastgroup or "op"))
        position = match.end()
    if not tokens:
        raise ExprError("empty expression: write an integer or an expression over names")
    return tokens


def _literal(value: int, source: str) -> int:
    if abs(value) > MAX_LITERAL:
        raise ExprError(
            f"integer {str(value)[:20]}... in {source[:40]!r} is over the bound {MAX_LITERAL:.0e}"
        )
    return value


def _check_nesting(tokens: list[str], source: str) -> None:
    """Refuse nesting deeper than :data:`MAX_NESTING` before the recursive parser sees it."""
    depth = deepest = 0
    for token in tokens:
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        raise ExprError(
            f"expression {source[:40]!r}... nests {deepest} deep, over the bound {MAX_NESTING}: "
            "name intermediate values in operating_point"
        )


def _parse_sum(tokens: list[str], source: str) -> tuple[Node, list[str]]:
    node, tokens = _parse_product(tokens, source)
    while tokens and tokens[0] in ("+", "-"):
        right, rest = _parse_product(tokens[1:], source)
        node, tokens = BinOp(tokens[0], node, right), rest
    return node, tokens


def _parse_product(tokens: list[str], source: str) -> tuple[Node, list[str]]:
    node, tokens = _parse_factor(tokens, source)
    while tokens and tokens[0] in ("*", "//"):
        right, rest = _parse_factor(tokens[1:], source)
        node, tokens = BinOp(tokens[0], node, right), rest
    return node, tokens


def _parse_factor(tokens: list[str], source: str) -> tuple[Node, list[str]]:
    if not tokens:
        raise ExprError(f"expression {source!r} ends early: an operand is missing")
    head, rest = tokens[0], tokens[1:]
    if head.isdigit():
        digits = head.lstrip("0")[:20] or "0"  # 20 digits already exceed the bound
        return Num(_literal(int(digits), source)), rest
    if head == "-":
        inner, rest = _parse_factor(rest, source)
        return BinOp("-", Num(0), inner), rest
    if head == "(":
        inner, rest = _parse_sum(rest, source)
        if not rest or rest[0] != ")":
            raise ExprError(f"missing ')' in expression {source!r}")
        return inner, rest[1:]
    if head[0].isalpha() or head[0] == "_":
        return Name(head), rest
    raise ExprError(f"unexpected {head!r} in expression {source!r}")


def _names(node: Node) -> frozenset[str]:
    if isinstance(node, Name):
        return frozenset({node.id})
    if isinstance(node, BinOp):
        return _names(node.left) | _names(node.right)
    return frozenset()


def _evaluate(node: Node, env: Mapping[str, int], text: str) -> int:
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        if node.id not in env:
            known = ", ".join(sorted(env)) or "none"
            raise ExprError(f"unknown name {node.id!r} in {text!r}; known names: {known}")
        return env[node.id]
    left = _evaluate(node.left, env, text)
    right = _evaluate(node.right, env, text)
    if node.op == "//" and right == 0:
        raise ExprError(f"division by zero in {text!r}: check the operating point")
    return bounded(_BINARY[node.op](left, right), text)


def bounded(value: int, text: str) -> int:
    """``value`` if its magnitude is within :data:`MAX_LITERAL`, else an ``ExprError`` naming
    ``text`` (what computed it)."""
    if abs(value) > MAX_LITERAL:
        raise ExprError(
            f"{text!r} evaluates to {magnitude(value)}, over the bound {MAX_LITERAL:.0e}: check "
            "the operating point"
        )
    return value


def magnitude(value: int) -> str:
    """An integer of any size in a few characters (``1.23e+20``; past floats, ``2^N``)."""
    if value.bit_length() < 1000:
        return f"{value:.3g}"
    return f"{'-' if value < 0 else ''}2^{value.bit_length() - 1}"


def _interval(node: Node, env: Mapping[str, tuple[int, int]], text: str) -> tuple[int, int]:
    if isinstance(node, Num):
        return node.value, node.value
    if isinstance(node, Name):
        if node.id not in env:
            raise ExprError(f"unknown name {node.id!r} in {text!r}")
        return env[node.id]
    (a, b), (c, d) = _interval(node.left, env, text), _interval(node.right, env, text)
    if node.op == "+":
        return bounded(a + c, text), bounded(b + d, text)
    if node.op == "-":
        return bounded(a - d, text), bounded(b - c, text)
    if node.op == "//" and c <= 0 <= d:
        raise ExprError(f"division by a range that holds zero in {text!r}: check the ranges")
    corners = [_BINARY[node.op](x, y) for x in (a, b) for y in (c, d)]
    return bounded(min(corners), text), bounded(max(corners), text)


# --- predicates -----------------------------------------------------------------------------

_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "le": operator.le,
    "lt": operator.lt,
    "ge": operator.ge,
    "gt": operator.gt,
    "eq": operator.eq,
    "ne": operator.ne,
}
PREDICATE_KEYS = (*_COMPARE, "all", "any", "not", "in")


@dataclass(frozen=True)
class Compare:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class AllOf:
    items: tuple[Predicate, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Predicate, ...]


@dataclass(frozen=True)
class Not:
    item: Predicate


@dataclass(frozen=True)
class In:
    value: Expr
    options: tuple[Expr, ...]


Predicate = Union[Compare, AllOf, AnyOf, Not, In]  # noqa: UP007 (runtime alias, see Node)


def parse_predicate(source: object) -> Predicate:
    """Parse a structured predicate (see the module docstring); raises ``ExprError``."""
    if not isinstance(source, Mapping) or len(source) != 1:
        raise ExprError(
            f"expected a mapping with exactly one of {', '.join(PREDICATE_KEYS)}, got {source!r}"
        )
    ((key, args),) = source.items()
    if key in _COMPARE:
        left, right = _pair(key, args)
        return Compare(key, parse_expr(left), parse_expr(right))
    if key in ("all", "any"):
        if not isinstance(args, list) or not args:
            raise ExprError(f"'{key}' takes a non-empty list of predicates, got {args!r}")
        items = tuple(parse_predicate(item) for item in args)
        return AllOf(items) if key == "all" else AnyOf(items)
    if key == "not":
        return Not(parse_predicate(args))
    if key == "in":
        value, options = _pair(key, args)
        if not isinstance(options, list) or not options:
            raise ExprError(f"'in' takes [expr, [expr, ...]], got {args!r}")
        return In(parse_expr(value), tuple(parse_expr(option) for option in options))
    raise ExprError(f"unknown predicate {key!r}: expected one of {', '.join(PREDICATE_KEYS)}")


def _pair(key: str, args: object) -> tuple[object, object]:
    if not isinstance(args, list) or len(args) != 2:
        raise ExprError(f"'{key}' takes a list of two operands, got {args!r}")
    return args[0], args[1]


def predicate_names(predicate: Predicate) -> frozenset[str]:
    """Every name a predicate reads."""
    if isinstance(predicate, Compare):
        return predicate.left.names() | predicate.right.names()
    if isinstance(predicate, AllOf | AnyOf):
        return frozenset().union(*(predicate_names(item) for item in predicate.items))
    if isinstance(predicate, Not):
        return predicate_names(predicate.item)
    return predicate.value.names().union(*(option.names() for option in predicate.options))


def evaluate_predicate(predicate: Predicate, env: Mapping[str, int]) -> bool:
    """Evaluate a predicate on call parameters; raises ``ExprError`` on a missing name."""
    if isinstance(predicate, Compare):
        compare = _COMPARE[predicate.op]
        return compare(predicate.left.evaluate(env), predicate.right.evaluate(env))
    if isinstance(predicate, AllOf):
        return all(evaluate_predicate(item, env) for item in predicate.items)
    if isinstance(predicate, AnyOf):
        return any(evaluate_predicate(item, env) for item in predicate.items)
    if isinstance(predicate, Not):
        return not evaluate_predicate(predicate.item, env)
    value = predicate.value.evaluate(env)
    return any(value == option.evaluate(env) for option in predicate.options)

"""YAML read as bounded data: a size, depth and alias budget checked before anything is built.

``yaml.safe_load`` never runs code, but it trusts the file's shape: a 1 KB file of nested aliases
("billion laughs") expands to billions of values as soon as anything walks it, and ten thousand
nested brackets exhaust the composer's recursion. Every YAML file the project reads (declarations,
settings, a checkpoint's ``flow.yaml``) goes through :func:`read_yaml`, which refuses, with one
line naming the file, the place, the value and the bound:

* a file that is not a regular file (a FIFO, a device: never read) or is larger than
  ``max_bytes`` (read no further than the bound);
* an integer of more than :data:`MAX_DIGITS` digits (``int`` would refuse past 4300 with advice
  to raise Python's limit, and a size that long is no size);
* nesting deeper than ``max_depth`` collections (checked while composing, before recursing);
* a document whose values, counted with every alias expanded, exceed ``max_nodes`` (counted on
  the composed graph, where an alias is still one shared node, so the count itself is cheap),
  or whose aliases refer to their own value (a cycle no reader can walk).

Within those bounds the document is constructed by a ``yaml.SafeLoader`` subclass: safe tags only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from engine.files_read import FileRefused, read_limited
from engine.sizes import MIB

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_DIGITS",
    "MAX_NODES",
    "BoundedLoader",
    "YamlError",
    "parse_yaml",
    "read_yaml",
    "read_yaml_text",
]

MAX_BYTES = MIB  # 1 MiB: the largest shipped YAML is ~10 KB
MAX_DEPTH = 64  # nested mappings/sequences; the deepest shipped document nests 8
MAX_NODES = 100_000  # values with every alias expanded; the largest shipped document has ~2,000
MAX_DIGITS = 30  # characters of one integer scalar; the largest shipped one has 8


class YamlError(ValueError):
    """A YAML file that is unreadable, malformed or over a bound; the message names the file."""


class BoundedLoader(yaml.SafeLoader):
    """A SafeLoader that refuses documents deeper than ``max_depth`` or larger than
    ``max_nodes`` once aliases are expanded. Subclass it to add data-only constructors."""

    max_depth = MAX_DEPTH
    max_nodes = MAX_NODES

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise YamlError(
                    f"line {mark.line + 1}: nesting depth {self._depth} exceeds the bound "
                    f"{self.max_depth}"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def fetch_flow_collection_start(self, token_class: type) -> None:
        """Refuse deep ``[[[[...`` while scanning: the scanner's lookahead over open flow
        collections is quadratic, so the composer's check alone would come seconds late."""
        if self.flow_level >= self.max_depth:
            mark = self.get_mark()
            raise YamlError(
                f"line {mark.line + 1}: nesting depth {self.flow_level + 1} exceeds the bound "
                f"{self.max_depth}"
            )
        super().fetch_flow_collection_start(token_class)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_DIGITS:
            raise YamlError(
                f"line {node.start_mark.line + 1}: an integer of {len(node.value):,} characters "
                f"({node.value[:12]}...), over the bound of {MAX_DIGITS}"
            )
        value: int = super().construct_yaml_int(node)
        return value

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        if node is not None:
            _expanded_size(node, self.max_nodes, {})
        return node


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
_IN_PROGRESS = -1


def _expanded_size(node: yaml.Node, bound: int, seen: dict[int, int]) -> int:
    """Values under ``node`` with aliases expanded; memoised per node, so linear in the file."""
    known = seen.get(id(node))
    if known == _IN_PROGRESS:
        raise YamlError(f"line {node.start_mark.line + 1}: an alias refers to its own value")
    if known is not None:
        return known
    seen[id(node)] = _IN_PROGRESS
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, bound, seen) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(
            _expanded_size(key, bound, seen) + _expanded_size(value, bound, seen)
            for key, value in node.value
        )
    if size > bound:
        raise YamlError(
            f"line {node.start_mark.line + 1}: aliases expand this value to {size} values, "
            f"over the bound {bound} (nested aliases, a 'billion laughs' file?)"
        )
    seen[id(node)] = size
    return size


def read_yaml(
    path: str | os.PathLike[str],
    *,
    loader: type[BoundedLoader] = BoundedLoader,
    max_bytes: int = MAX_BYTES,
) -> Any:
    """The document in ``path``, read as data within the bounds above.

    Raises :class:`YamlError` (its message starts with the path) for an unreadable file, a file
    over ``max_bytes``, invalid YAML or a document over the loader's depth or node bound;
    callers rewrap it in their own error type, adding the fix in their own words.
    """
    return parse_yaml(read_yaml_text(path, max_bytes=max_bytes), str(path), loader=loader)


def read_yaml_text(path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES) -> str:
    """The text of ``path``, read within ``max_bytes`` (the file checks of :func:`read_yaml`),
    not yet parsed: for a reader that keeps what it parsed of each text."""
    p = Path(path)
    try:
        raw = read_limited(p, max_bytes)
    except FileRefused as error:
        raise YamlError(str(error)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise YamlError(f"{p}: not UTF-8 text (byte {error.start})") from None


def parse_yaml(text: str, name: str, *, loader: type[BoundedLoader] = BoundedLoader) -> Any:
    """``text`` (named ``name`` in errors) read as data within the loader's bounds."""
    try:
        return yaml.load(text, Loader=loader)
    except YamlError as error:
        raise YamlError(f"{name}: {error}") from None
    except yaml.YAMLError as error:
        raise YamlError(f"{name}: not valid YAML ({_one_line(error)})") from None
    except RecursionError:
        raise YamlError(f"{name}: nested too deeply to read") from None


def _one_line(error: yaml.YAMLError) -> str:
    return " ".join(str(error).split())

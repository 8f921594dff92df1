"""Files read for a user, bounded: confined to their folder, regular, and read only to a bound.

A checkpoint folder is data from anywhere, and its configuration names other files. Read as is,
a ``config.json`` could name ``/dev/zero`` (read without end), a FIFO (blocks forever), ``/etc/...``
or ``../`` (a file outside the folder) or a symlink out of it, and a 3 GB ``config.json`` would be
read whole. Every such read goes through here:

* :func:`confined` turns a name a file gave into a path inside the folder, or refuses it: an
  absolute name, a ``..`` part, or a name whose resolved path (symlinks followed) leaves the
  folder;
* :func:`read_limited` reads a regular file of at most ``max_bytes`` (a FIFO, a device or a
  folder is refused without being read; the size is checked before reading, and the read stops
  at the bound even if the file grows meanwhile);
* :func:`read_json` is :func:`read_limited` parsed as JSON, with a nesting and an integer-length
  bound (a 5000-digit integer or 100,000 nested brackets is a one-line refusal, not a
  ``ValueError`` from ``int`` or a ``RecursionError``).

Each raises :class:`FileRefused` (a ``ValueError``) whose message names the path, what is wrong
and the bound; callers rewrap it in their own error type, adding the fix in their own words.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path, PurePath
from typing import Any

from engine.sizes import MIB

__all__ = [
    "JSON_BYTES",
    "JSON_DEPTH",
    "JSON_DIGITS",
    "FileRefused",
    "confined",
    "read_json",
    "read_limited",
]

JSON_BYTES = MIB  # 1 MiB: a released model's config.json is a few KB
JSON_DEPTH = 64  # nested objects/arrays; a released config nests 4
# Digits of one JSON number: a size, an id or a float's digits are far fewer; transformers
# writes an unknown length as int(1e30), 31 digits (tokenizer_config.json's model_max_length)
JSON_DIGITS = 40
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


class FileRefused(ValueError):
    """A file a folder names that is not read: outside the folder, not regular, or too large."""


def confined(folder: Path, name: str, what: str) -> Path:
    """``folder / name`` if the name stays inside ``folder`` (relative, no ``..``) and the file
    is a regular file or missing (the caller names what is missing), else :class:`FileRefused`.

    A symlink inside the folder is followed wherever it points, as long as it ends at a regular
    file: the hub's cache keeps every checkpoint file as a link into its ``blobs`` folder, and
    only the folder's maker (not a config) can place one. A link to a device, a FIFO or nowhere
    regular is refused like the thing itself.

    ``what`` says where the name came from (``config.json's moshi_name``), for the message.
    """
    parts = PurePath(name).parts
    if not name or PurePath(name).is_absolute() or ".." in parts:
        raise FileRefused(
            f"{what} is {name!r}: name a file inside the folder {folder} (no absolute path, "
            "no '..')"
        )
    path = folder / name
    try:
        mode = path.stat().st_mode
    except RuntimeError:  # a symlink loop
        raise FileRefused(f"{what} is {name!r}, a symlink that loops") from None
    except OSError:
        return path  # missing: the caller names what the folder lacks
    if not stat.S_ISREG(mode):
        raise FileRefused(f"{what} is {name!r}, which is {_kind(mode)}, not a regular file")
    return path


def read_limited(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` if it holds at most ``max_bytes``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once
    except OSError as error:
        raise FileRefused(f"{path}: cannot read it ({error.strerror or error})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{path} is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise FileRefused(
                f"{path} has {info.st_size:,} bytes, larger than the bound of {max_bytes:,} bytes"
            )
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as error:
        raise FileRefused(f"{path}: cannot read it ({error.strerror or error})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise FileRefused(f"{path} grew past the bound of {max_bytes:,} bytes while read")
    return data


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def read_json(path: Path, max_bytes: int = JSON_BYTES) -> Any:
    """The JSON document in ``path``, within the bounds of the module docstring."""
    data = read_limited(path, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileRefused(f"{path}: not UTF-8 text (byte {error.start})") from None
    depth = _depth(text)
    if depth > JSON_DEPTH:
        raise FileRefused(f"{path}: nests {depth} deep, over the bound of {JSON_DEPTH}")
    try:
        return json.loads(text, parse_int=_number(path, int), parse_float=_number(path, float))
    except json.JSONDecodeError as error:
        raise FileRefused(f"{path}: not valid JSON ({error})") from None


def _depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside strings (an upper bound on JSON's depth)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _number(path: Path, kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        if len(text) > JSON_DIGITS:
            raise FileRefused(
                f"{path}: a number of {len(text):,} characters ({text[:12]}...), over the bound "
                f"of {JSON_DIGITS}"
            )
        return kind(text)

    return parse

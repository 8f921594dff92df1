"""Claims on output names: a run holds its outputs' names from before its models load.

A file's own ``flock`` (:mod:`engine.files`) keeps a second writer off an output only once the
file is open, and a run opens its outputs after its models load (a minute or more): a second
run started meanwhile saw no file, loaded too, and was refused only then. A claim closes that
gap: :func:`claim` is taken right after a run's checks and held until it ends, and
:func:`claimed_elsewhere` (which :func:`engine.files.check_output` asks) refuses a name another
process claims, before any work.

A claim is a Unix socket bound in Linux's abstract namespace, named after the output's folder
(device and inode, so every spelling of one folder is one name) and its file name: binding is
atomic, no file is created anywhere, and the kernel drops the name when the process ends, however
it ends (a SIGKILL leaves nothing stale). Where there is no abstract namespace (not Linux) claims
are not taken and the files' locks alone keep writers apart. A process may claim one name more
than once (``demo`` claims its files, then the conversation it runs claims them again); the name
is released with the last claim.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ClaimedElsewhere", "being_written", "claim", "claimed_elsewhere"]

_PREFIX = b"\0duplexcadence-output-"
_lock = threading.Lock()
_held: dict[bytes, tuple[socket.socket | None, int]] = {}  # address -> (socket, claims)


class ClaimedElsewhere(Exception):
    """Another process holds the claim on this output's name; the message says so."""


def being_written(path: Path) -> str:
    """The words for an output another run holds (its claim or its file's lock)."""
    return f"{path} is being written by another run: wait for it to end, or choose another name"


def _address(path: Path) -> bytes | None:
    """The abstract socket name of ``path``'s claim; None where claims are not taken."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        folder = os.stat(path.parent)
    except OSError:
        return None  # no folder: the output's check names that
    key = f"{folder.st_dev}:{folder.st_ino}:".encode() + os.fsencode(path.name)
    return _PREFIX + hashlib.sha256(key).hexdigest()[:40].encode()


def _bind(address: bytes, path: Path) -> socket.socket | None:
    """A socket bound to ``address`` (``path``'s); None if claims cannot be made here."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise ClaimedElsewhere(being_written(path)) from None
        return None
    return sock


def claimed_elsewhere(path: Path) -> bool:
    """Whether another process holds the claim on ``path`` (this process's own do not count)."""
    address = _address(path)
    if address is None:
        return False
    with _lock:
        if address in _held:
            return False
        try:
            sock = _bind(address, path)
        except ClaimedElsewhere:
            return True
        if sock is not None:
            sock.close()
    return False


@contextmanager
def claim(path: Path) -> Iterator[None]:
    """Hold the claim on ``path`` while the block runs; :class:`ClaimedElsewhere` if another
    process holds it."""
    address = _address(path)
    if address is None:
        yield
        return
    with _lock:
        sock, count = _held.get(address, (None, 0))
        if count == 0:
            sock = _bind(address, path)
        _held[address] = (sock, count + 1)
    try:
        yield
    finally:
        with _lock:
            sock, count = _held.pop(address)
            if count > 1:
                _held[address] = (sock, count - 1)
            elif sock is not None:
                sock.close()

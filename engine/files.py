"""Files written for a user: never through a symlink, never clobbered by a failed run.

Two ways to write, both on private files that no other path can redirect:

* :func:`atomic_write` for a file produced whole (exports, settings, a finished WAV): a private
  temporary file beside the target (``os.replace`` is atomic within one filesystem, hence
  "beside"), written, fsynced, renamed over the name, then the folder fsynced so the rename itself
  survives a power loss. A reader sees the old file or the whole new one, never a partial one.
* :class:`Output` for a file that grows while a run goes on (a trace, a recording): a file
  created under its final name when none is there, so a killed run leaves everything written up
  to the kill; when a file is there (and replacing it was asked for), a private temporary file
  renamed over it only by :meth:`Output.commit`, so a run that fails leaves the earlier file
  intact.

Every file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a symlink or a file planted at the
name is never followed or truncated. Its mode is what the umask gives an ordinary file (read from
the kernel as it creates the file; the process umask is never changed, which would race other
threads), kept private (0600) while it is being written. A writer holds an ``flock`` on its file
for as long as it writes, which keeps a second run off the same output.

Nothing is removed but the exact names this writer created: no name is ever matched against a
pattern (an output called ``a*.wav`` or a user's own ``.out.wav.draft.tmp`` beside it is never
touched). A run killed with SIGKILL may leave its private ``.<name>.<hex>.tmp`` behind; it is
the user's to delete, since no later run can prove it was never someone else's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from engine.claims import being_written, claimed_elsewhere

__all__ = ["Output", "OutputError", "atomic_write", "check_output"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_PRIVATE = 0o600


class OutputError(OSError):
    """An output that cannot be written as asked; the message names the path and the fix."""


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def _create(path: Path) -> tuple[int, int]:
    """Create ``path`` exclusively, locked; returns ``(fd, mode)`` with the mode the umask gives.

    The kernel applies the umask at creation (so the umask is read without changing it); the
    file is then made private until :func:`_publish` gives it that mode.
    """
    fd = os.open(path, _CREATE, 0o666)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        os.fchmod(fd, _PRIVATE)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd, mode


def _fsync_folder(folder: Path) -> None:
    """Make a rename or a creation in ``folder`` durable (where folders can be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a folder; the rename is still atomic
    finally:
        os.close(fd)


def check_output(path: Path, *, overwrite: bool, flag: str = "--force") -> None:
    """Refuse ``path`` before any work: a folder, a missing or read-only folder, a name another
    run claims (:mod:`engine.claims`), a file that is there without ``overwrite``, or a file
    another run is writing (its lock is held)."""
    if path.name in ("", ".", "..") or path.is_dir():
        raise OutputError(f"{path} is a folder: name a file in it")
    _check_name(path)
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"folder {folder} does not exist: create it (mkdir -p {folder})")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"folder {folder} is not writable: choose a folder you can write")
    if claimed_elsewhere(path):  # another run checked it and is loading, or writes it
        raise OutputError(being_written(path))
    if not (path.exists() or path.is_symlink()):
        return
    if not overwrite:
        raise OutputError(
            f"{path} already exists: choose another name, or pass {flag} to replace it"
        )
    held = _hold(path)  # raises while another run's writer holds the lock
    if held is not None:
        os.close(held)


_TEMP_EXTRA = len(".") + len(".12345678.tmp")  # what _temp_name adds to a name


def _check_name(path: Path) -> None:
    """Refuse a name no run could finish writing, before any work: control characters, bytes
    that are not UTF-8 (a trace records its outputs' names as UTF-8), or longer than the
    folder's NAME_MAX less what the temporary name adds (the failure would come at the end)."""
    name = path.name
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise OutputError(f"{path!s:.60} has a control character in its name: choose a plain name")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise OutputError(
            f"{name.encode('utf-8', 'surrogateescape')!r} is not UTF-8: choose a UTF-8 name"
        ) from None
    folder = path.parent if path.parent.is_dir() else Path(".")
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    if size > name_max - _TEMP_EXTRA:
        raise OutputError(
            f"{name[:24]}... is {size} bytes long; names in {folder} may have "
            f"{name_max - _TEMP_EXTRA} (NAME_MAX {name_max} less {_TEMP_EXTRA} for the "
            "temporary file): choose a shorter name"
        )


def atomic_write(
    path: Path,
    write: Callable[[IO[Any]], object],
    *,
    text: bool = False,
    overwrite: bool = True,
) -> Path:
    """Call ``write`` on a private temporary file beside ``path``, then publish it as ``path``.

    ``text=True`` opens it as UTF-8 text with newlines untranslated (CSV and JSON writers),
    otherwise as bytes. ``overwrite=False`` refuses (``OutputError``) a file already at ``path``,
    checked atomically at the rename. A symlink at ``path`` is replaced, never followed. The
    temporary file is removed if anything fails, so ``path`` keeps its earlier content.
    Returns ``path``.
    """
    if path.name in ("", ".", "..") or path.is_dir():
        raise OutputError(f"{path} is a folder: name a file in it")
    tmp = _temp_name(path)
    fd, mode = _create(tmp)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), mode)
            _publish(tmp, path, overwrite)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _publish(tmp: Path, path: Path, overwrite: bool) -> None:
    if overwrite:
        os.replace(tmp, path)
    else:
        try:
            os.link(tmp, path, follow_symlinks=False)  # fails if anything is at path
        except FileExistsError:
            raise OutputError(
                f"{path} already exists: choose another name, or pass --force to replace it"
            ) from None
        tmp.unlink()
    _fsync_folder(path.parent)


class Output:
    """A file written while a run goes on; see the module docstring for what a kill leaves.

    Args:
        path: the output's name.
        overwrite: replace a file already there (at :meth:`commit`); without it such a file
            is refused with an ``OutputError`` naming ``flag``.
        text: open as UTF-8 text (newlines untranslated) instead of bytes.
        flag: the command-line flag that allows replacing, for the message.
    """

    def __init__(
        self, path: Path, *, overwrite: bool = False, text: bool = False, flag: str = "--force"
    ) -> None:
        self.path = Path(path)
        check_output(self.path, overwrite=overwrite, flag=flag)
        replacing = self.path.exists() or self.path.is_symlink()
        self.target = _temp_name(self.path) if replacing else self.path
        self._held = _hold(self.path) if replacing else None  # keeps a second run off it
        try:
            fd, self._mode = _create(self.target)
        except FileExistsError:
            self._release()
            raise OutputError(
                f"{self.path} appeared while starting (another run?): choose another name"
            ) from None
        self.replacing = replacing
        self.file: IO[Any] = (
            os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb")
        )
        if not replacing:
            os.fchmod(fd, self._mode)  # under its final name from the start
            _fsync_folder(self.path.parent)
        self.done = False

    def _release(self) -> None:
        if self._held is not None:
            os.close(self._held)
            self._held = None

    def sync(self) -> None:
        """Flush to the kernel and fsync: what was written survives a kill or a power loss."""
        self.file.flush()
        os.fsync(self.file.fileno())

    def commit(self) -> Path:
        """Finish: sync, close and (when replacing) rename over the earlier file. Idempotent."""
        if not self.done:
            self.done = True
            published = not self.replacing
            try:
                self.sync()
                if self.replacing:
                    os.fchmod(self.file.fileno(), self._mode)
                    self.file.close()
                    _publish(self.target, self.path, overwrite=True)
                    published = True
            finally:
                with contextlib.suppress(OSError):
                    self.file.close()
                if not published:  # still under its private name: ours to remove
                    self.target.unlink(missing_ok=True)
                self._release()
        return self.path

    def abort(self, *, discard: bool = False) -> None:
        """Give up after a failure: a replacement is dropped and the earlier file stays; a new
        file keeps what was written (the evidence of what failed) unless ``discard``.
        Idempotent."""
        if not self.done:
            self.done = True
            with contextlib.suppress(OSError):
                self.file.close()
            if self.replacing or discard:
                self.target.unlink(missing_ok=True)
            self._release()


def _hold(path: Path) -> int | None:
    """An fd holding the lock of the file at ``path`` (None for a symlink or a non-file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OutputError(being_written(path)) from None
    return fd

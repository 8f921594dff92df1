"""Ctrl-C and SIGTERM held back while a few lines finish writing what belongs together.

The headless commands end on Ctrl-C or SIGTERM (``app.cli`` makes SIGTERM raise
:class:`Terminated`, a ``KeyboardInterrupt``, so a stopped run closes its files as on Ctrl-C and
the command still tells the two apart: 130 and "interrupted", 143 and "terminated"). Raised at
an arbitrary line, such an interrupt could fall
between a period's trace line and its audio, or inside the closing of an output (the WAV header
patched, the replacement renamed over the earlier file). :func:`interrupts_deferred` holds the
first such signal until its block ends, then raises it there (``KeyboardInterrupt`` or
:class:`Terminated`); a second one
during the block raises at once (a stuck block can still be left). It acts on the main thread
only (the only one Python delivers signals to) and only on signals whose handler raises
(never on an ignored one: ``nohup`` or a background job stays deaf to Ctrl-C).
:class:`WholeExitStack` closes what it holds that way.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType, TracebackType

__all__ = ["Terminated", "WholeExitStack", "interrupts_deferred", "stopped_by"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM: it ends a run as Ctrl-C does, and the command exits 143 (128 + SIGTERM)."""


def stopped_by(stop: KeyboardInterrupt) -> str:
    """How a run was stopped, in the words its messages use: ``SIGTERM`` or ``Ctrl-C``."""
    return "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"


def _raise(signum: int) -> None:
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block whole: a first Ctrl-C or SIGTERM raises ``KeyboardInterrupt`` after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        if held:
            _raise(signum)  # the second one: do not wait any longer
        held.append(signum)

    previous = {}
    for signum in SIGNALS:
        handler = signal.getsignal(signum)
        if callable(handler):  # not SIG_IGN or SIG_DFL: a handler that interrupts
            previous[signum] = signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        _raise(held[0])


class WholeExitStack(ExitStack):
    """An ``ExitStack`` whose closing is not cut by a first Ctrl-C or SIGTERM: every output it
    holds is closed (a WAV's header patched, a replacement renamed), then the interrupt raises."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        with interrupts_deferred():
            return super().__exit__(exc_type, exc, tb)

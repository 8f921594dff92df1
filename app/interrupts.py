"""Ctrl-C and SIGTERM held back while a few lines finish writing what belongs together.

The headless commands end on Ctrl-C or SIGTERM (``app.cli`` makes SIGTERM raise
``KeyboardInterrupt`` as Ctrl-C does). Raised at an arbitrary line, such an interrupt could fall
between a period's trace line and its audio, or inside the closing of an output (the WAV header
patched, the replacement renamed over the earlier file). :func:`interrupts_deferred` holds the
first such signal until its block ends, then raises ``KeyboardInterrupt`` there; a second one
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

__all__ = ["WholeExitStack", "interrupts_deferred"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block whole: a first Ctrl-C or SIGTERM raises ``KeyboardInterrupt`` after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        if held:
            raise KeyboardInterrupt  # the second one: do not wait any longer
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
        raise KeyboardInterrupt


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

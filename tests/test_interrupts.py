"""``app.interrupts``: a first Ctrl-C or SIGTERM waits for the block's end, a second does not,
an ignored signal stays ignored, and off the main thread nothing changes."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from app.interrupts import WholeExitStack, interrupts_deferred


@pytest.fixture
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raising ``KeyboardInterrupt``, as ``duplexcadence`` sets it, and Ctrl-C as in a
    terminal's foreground command (a test run in the background ignores SIGINT: Python keeps
    an inherited SIG_IGN, and ``interrupts_deferred`` rightly leaves an ignored signal alone)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    ctrl_c = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, ctrl_c)
    signal.signal(signal.SIGTERM, previous)


def test_a_first_signal_waits_for_the_end_of_the_block(sigterm_interrupts: None) -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("the rest of the block")
    assert done == ["the rest of the block"]
    with pytest.raises(KeyboardInterrupt):  # the handler is back: the next one raises at once
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_second_signal_does_not_wait(sigterm_interrupts: None) -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        done.append("not reached")
    assert done == []


def test_an_exit_stack_closes_everything_before_the_interrupt(sigterm_interrupts: None) -> None:
    closed = []
    with pytest.raises(KeyboardInterrupt), WholeExitStack() as stack:
        stack.callback(closed.append, "second")
        stack.callback(closed.append, "first")
        stack.callback(os.kill, os.getpid(), signal.SIGTERM)
    assert closed == ["first", "second"]


def test_ignored_signals_and_other_threads_are_left_alone() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)  # ignored before, ignored still
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
    seen = []

    def elsewhere() -> None:
        with interrupts_deferred():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGINT)]

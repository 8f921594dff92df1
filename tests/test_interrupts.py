"""``app.interrupts``: a first Ctrl-C or SIGTERM waits for the block's end, a second does not,
an ignored signal stays ignored, and off the main thread nothing changes."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from app.interrupts import WholeExitStack, interrupts_deferred


def signal_me(signum: int) -> None:
    """Signal this thread, as a terminal's Ctrl-C reaches the main thread: ``os.kill`` signals
    the process, which the kernel may hand to any thread that leaves it unblocked (a suite
    earlier in the run may have left one), and the handler then runs a few instructions later;
    ``pthread_kill`` delivers it here and Python runs the handler before it returns."""
    signal.pthread_kill(threading.get_ident(), signum)


@pytest.fixture
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raising ``KeyboardInterrupt``, as ``duplexcadence`` sets it."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_first_signal_waits_for_the_end_of_the_block(sigterm_interrupts: None) -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        signal_me(signal.SIGTERM)
        done.append("the rest of the block")
    assert done == ["the rest of the block"]
    with pytest.raises(KeyboardInterrupt):  # the handler is back: the next one raises at once
        signal_me(signal.SIGTERM)


def test_a_second_signal_does_not_wait(sigterm_interrupts: None) -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        signal_me(signal.SIGTERM)
        signal_me(signal.SIGINT)
        done.append("not reached")
    assert done == []


def test_an_exit_stack_closes_everything_before_the_interrupt(sigterm_interrupts: None) -> None:
    closed = []
    with pytest.raises(KeyboardInterrupt), WholeExitStack() as stack:
        stack.callback(closed.append, "second")
        stack.callback(closed.append, "first")
        stack.callback(signal_me, signal.SIGTERM)
    assert closed == ["first", "second"]


def test_ignored_signals_and_other_threads_are_left_alone() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with interrupts_deferred():
            signal_me(signal.SIGTERM)  # ignored before, ignored still
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

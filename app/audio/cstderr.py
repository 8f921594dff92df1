"""PortAudio's own error lines, rate-limited, and a thread that floods them parked.

PortAudio prints through the C library's ``stderr`` stream (``PaUtil_DebugPrint``; its setter
is not exported). When the sound server stops under an output stream, PortAudio 19.6's ALSA
callback thread loops on a failed assertion and prints its line each time: ~880,000 lines a
second (88 MB/s to a terminal or a log, one core busy), and nothing stops it (the stream's
abort waits on that very thread; see :func:`app.audio.devices.close_stream`).

So the C ``stderr`` stream (glibc's ``stderr`` pointer; Python writes to fd 2 itself and is not
affected) is pointed, once PortAudio loads, at a stream of our own on a pipe, which stdio does
not lock (``__fsetlocking``: a thread blocked in it holds no lock that another waits on). A
daemon thread reads the pipe and passes at most ``LINES_PER_S`` lines a second on to fd 2, and
the same line at most ``REPEATS`` times, saying how many it held back after 1, 2, 4, 8...
seconds (the log grows as the log of the time). When one second brings ``FLOOD_LINES`` lines
(a burst at start-up is a few dozen), the reader stops reading; once the looping thread has
filled the pipe and waits in ``write``, the stream's file descriptor is pointed at a fresh
pipe (``dup2``) and reading goes on there. The waiting ``write`` stays on the old pipe, which is
never read: that thread is parked for good, with no CPU and no more lines, while every other
writer goes on through the new pipe. A flood that stops short of a full pipe within 5 s is read
on as before. At exit C ``stderr`` is the original stream again. The cost of a park: one pipe
and the parked thread, until the process ends.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import os
import sys
import threading
import time

__all__ = ["FLOOD_LINES", "LINES_PER_S", "REPEATS", "capture_c_stderr", "parked"]

LINES_PER_S = 10  # lines passed on to fd 2 per second; the rest are counted
REPEATS = 3  # times the same line is passed on; its repeats are counted
FLOOD_LINES = 200  # lines in one second, then a full pipe: a thread printing in a loop
_IONBF = 2  # setvbuf: unbuffered, as stderr is
_FSETLOCKING_BYCALLER = 2  # __fsetlocking: stdio takes no lock on the stream
_FIONREAD = 0x541B  # ioctl: bytes waiting in a pipe (Linux)
_F_GETPIPE_SZ = 1032  # fcntl: a pipe's capacity (Linux)

_lock = threading.Lock()
_started = False
_parked = 0


def parked() -> int:
    """How many flooding pipes were parked (each holds a thread that printed in a loop)."""
    return _parked


def capture_c_stderr() -> bool:
    """Point the C library's ``stderr`` at a rate-limited pipe (module doc); idempotent.
    False where that cannot be done (no glibc ``stderr`` symbol): lines then go as before."""
    global _started
    with _lock:
        if _started:
            return True
        if not sys.platform.startswith("linux"):
            return False
        try:
            libc = ctypes.CDLL(None)
            pointer = ctypes.c_void_p.in_dll(libc, "stderr")
        except (OSError, ValueError):
            return False
        libc.fdopen.restype = ctypes.c_void_p
        libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
        libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t]
        libc.__fsetlocking.argtypes = [ctypes.c_void_p, ctypes.c_int]
        read_fd, write_fd = os.pipe()
        stream = libc.fdopen(write_fd, b"w")
        if not stream:
            os.close(read_fd)
            os.close(write_fd)
            return False
        libc.setvbuf(stream, None, _IONBF, 0)
        libc.__fsetlocking(stream, _FSETLOCKING_BYCALLER)  # a parked writer holds no lock
        atexit.register(_restore, pointer, pointer.value)
        pointer.value = stream
        threading.Thread(
            target=_forward, args=(read_fd, write_fd), name="c-stderr", daemon=True
        ).start()
        _started = True
        return True


def _restore(pointer: ctypes.c_void_p, original: int | None) -> None:
    pointer.value = original


def _forward(read_fd: int, write_fd: int) -> None:
    """Pass lines on to fd 2, rate-limited; park a pipe that floods (module doc)."""
    global _parked
    seen: dict[bytes, int] = {}  # how often each line came (a few hundred kinds at most)
    second, lines_in_second, held, partial = time.monotonic(), 0, 0, b""
    passed, report_at, interval = 0, 0.0, 1.0
    while True:
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            return
        now = time.monotonic()
        if now - second >= 1.0:
            second, lines_in_second, passed = now, 0, 0
        if held and now >= report_at:  # at 1, 2, 4, 8... s: the log grows as log(time)
            _say(f"duplexcadence: {held} more lines from the audio library held back\n")
            held, report_at, interval = 0, now + interval, min(2 * interval, 3600.0)
        lines = (partial + chunk).split(b"\n")
        partial = lines.pop()[-4096:]  # a line still being written (bounded)
        if len(seen) > 1000:
            seen.clear()
        for line in lines:
            count = seen[line] = seen.get(line, 0) + 1
            if count <= REPEATS and passed < LINES_PER_S:
                passed += 1
                _say(line.decode(errors="replace") + "\n")
            else:
                held += 1
        lines_in_second += len(lines)
        if lines_in_second >= FLOOD_LINES and _filled(read_fd):
            # The stream's fd now leads to a new pipe; the write blocked on the full one stays
            # blocked (its pipe is never read, never closed): that thread is parked.
            read_fd, new_write = os.pipe()
            os.dup2(new_write, write_fd)
            os.close(new_write)
            _parked += 1
            _say(
                "duplexcadence: an audio thread prints in a loop (its sound server is gone); it "
                "is parked, silent and idle, until the app exits\n"
            )
            second, lines_in_second, partial = time.monotonic(), 0, b""


def _filled(read_fd: int, within_s: float = 5.0) -> bool:
    """Stop reading and wait until the writers have filled the pipe and stopped (the one that
    loops is then blocked in ``write``: the pipe holds as much for two looks 20 ms apart); False
    if they stop short of it within ``within_s``."""
    capacity = fcntl.fcntl(read_fd, _F_GETPIPE_SZ)
    waiting, before = ctypes.c_int(0), -1
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        fcntl.ioctl(read_fd, _FIONREAD, waiting)
        if capacity - waiting.value < 4096 and waiting.value == before:
            return True
        before = waiting.value
        time.sleep(0.02)
    return False


def _say(text: str) -> None:
    with contextlib.suppress(OSError):  # fd 2 closed: nowhere to say it
        os.write(2, text.encode(errors="replace"))

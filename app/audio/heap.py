"""Keep the cyclic garbage collector from stalling the audio callbacks.

sounddevice runs our PortAudio callbacks in Python, so each one needs the GIL, and a full
collection holds the GIL while it walks every tracked object: with torch, a model and a test
suite's worth of objects loaded that took 350 ms here, longer than the 0.1 s PortAudio buffer.
The device then starves (measured: 22 output underflows in 5 s of playback with a collection
every 0.3 s on another thread; without them, none). :func:`settle_heap` collects once and
freezes what survives (``gc.freeze``: the survivors move to a permanent generation that later
collections skip), so later collections walk only what was made since: milliseconds.

Called before a device stream starts and after a session's warm-up, when the long-lived
objects (weights, graphs, Qt) exist. Freezing keeps no garbage alive (it runs right after a
collection), and frozen objects are still freed by reference counting when their last user
goes; but a frozen *cycle* is never collected. So a closing session calls :func:`release_heap`:
its cycles (closures over the stream, graphs holding GPU memory) go back to the collector.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)


def settle_heap() -> float:
    """Collect, then freeze the survivors out of later collections; returns the seconds spent."""
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    spent = time.perf_counter() - t0
    logger.debug("heap settled in %.1f ms: %d objects frozen", spent * 1e3, gc.get_freeze_count())
    return spent


def release_heap() -> None:
    """Give every frozen object back to the collector (a session ends: its cycles must go)."""
    gc.unfreeze()

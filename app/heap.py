"""The process's garbage-collection policy: what is frozen, and which thread may collect.

A full collection holds the interpreter lock while it walks every tracked object: with torch
imported and a model loaded that is 100-350 ms (measured: 100-200 ms during the GUI's model
build, 350 ms on a test suite's heap). The PortAudio callbacks are Python (sounddevice) and
need that lock, so a collection longer than the 0.1 s buffer starves the device (measured: 22
output underflows in 5 s of playback with a collection every 0.3 s on another thread; none
once the heap was frozen), and the window cannot paint meanwhile. ``gc.freeze`` moves every
tracked object to a permanent generation that later collections skip: they then walk only
what was made since, milliseconds.

- :func:`freeze_heap` is safe on any thread: it destroys nothing. Device streams call it as they
  start, and the GUI's engine thread before it builds a session.
- :func:`settle_heap` collects first, so no garbage is frozen with the rest; only the thread
  that owns collection may call it (the GUI thread in the app, whose collector destroys Qt
  objects only there, ``app.gui.collector``; the main thread headless).
- :func:`release_heap` gives everything back: frozen objects are still freed by reference
  counting, but a frozen *cycle* never is, so a closing session releases the heap and its
  cycles (closures over the stream, graphs holding GPU memory) go with the next collection.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_heap", "release_heap", "settle_heap"]


def freeze_heap() -> None:
    """Hide every object alive now from later collections (any thread: nothing is freed)."""
    gc.freeze()


def settle_heap() -> None:
    """Collect, then freeze the survivors (only on the thread that owns collection)."""
    gc.collect()
    gc.freeze()


def release_heap() -> None:
    """Give every frozen object back to the collector (a session ends: its cycles must go)."""
    gc.unfreeze()

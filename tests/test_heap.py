"""app.heap takes the long-lived heap out of later collections, which hold the GIL that the
PortAudio callbacks need (tests/test_audio_loopback.py is the end-to-end check)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from app.heap import freeze_heap, release_heap, settle_heap


def walked() -> int:
    """Objects a full collection walks now (frozen ones are not listed): its cost, counted
    instead of timed (a timing is the machine's load as much as the heap)."""
    return len(gc.get_objects())


@pytest.fixture(scope="module")
def heap() -> list[list[list[int]]]:
    """About two million tracked objects, like a process holding a model and a GUI; built once
    for the module with the collector off, whose collections would walk the growing heap again
    and again."""
    gc.disable()
    try:
        return [[[] for _ in range(9)] for _ in range(200_000)]
    finally:
        gc.enable()


@pytest.fixture
def big_heap(heap: list[list[list[int]]]) -> Iterator[list[list[list[int]]]]:
    yield heap
    gc.unfreeze()  # give this test's objects back to the collector


def test_settled_heap_leaves_later_collections_short(big_heap: list) -> None:
    gc.unfreeze()
    before = walked()
    settle_heap()
    after = walked()
    assert gc.get_freeze_count() >= 2_000_000
    assert after < before / 100, (
        f"a collection walks {after} objects after settling, {before} before"
    )


def test_settling_frees_garbage_first() -> None:
    class Node:
        def __init__(self) -> None:
            self.other: Node | None = None

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector can free it
    ref = weakref.ref(a)  # (gc.get_objects() does not list frozen objects: ask the object)
    del a, b
    settle_heap()
    assert ref() is None
    gc.unfreeze()


def test_freezing_frees_nothing_and_release_gives_the_heap_back(big_heap: list) -> None:
    """freeze_heap may run on any thread: it destroys nothing (a cycle made before it stays
    until release_heap, after which a collection frees it)."""

    class Node:
        def __init__(self) -> None:
            self.other: Node | None = None

    gc.unfreeze()
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    del a, b
    freeze_heap()
    assert gc.get_freeze_count() >= 2_000_000
    gc.collect()
    assert ref() is not None  # frozen, so not collected
    release_heap()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None

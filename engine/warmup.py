"""The warm-up: a family's opening calls run before traffic, then the engine sealed.

The catalog is known before the first period (the declaration enumerates it), so a family drives
its model through the calls a conversation opens with while the replay engine captures their
graphs, and :func:`warm_and_seal` seals the engine after them: a capture after this point is a
bug, not a slow period. What to drive is the family's (Token2Wav's turn shapes, Moshi's opening and
steady frames under every replay arm); running the steps with their progress, waiting for the
device, sealing and the report are the same for every family and live here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engine.replay import ReplayEngine

__all__ = ["warm_and_seal"]


def warm_and_seal(
    replay: ReplayEngine,
    steps: Sequence[Callable[[], object]],
    *,
    report: Callable[[str, float], None],
    device: torch.device | str,
    seal: bool = True,
    restore: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` in order, reporting ``("capture", fraction)`` after each; then
    ``restore`` (the model back to a conversation's start), wait for ``device``, seal the engine
    (if ``seal``: an arm that replays nothing has nothing to seal) and drain its counters and
    events, so the conversation's first period counts from zero.

    Returns what the warm-up did: ``seconds`` (the steps, the restore and the wait),
    ``captures``, ``capture_s``, ``capture_bytes`` and ``events`` (how many the warm-up
    recorded); the family adds what it drove (calls, frames, arms).
    """
    report("capture", 0.0)
    t0 = time.perf_counter()
    for i, step in enumerate(steps):
        step()
        report("capture", (i + 1) / len(steps))
    if restore is not None:
        restore()
    where = torch.device(device)
    if where.type == "cuda":
        torch.cuda.synchronize(where)
    if seal:
        replay.seal()
    totals = replay.snapshot()["total"]
    events = replay.drain_events()
    replay.reset_counters()
    return {
        "seconds": round(time.perf_counter() - t0, 3),
        "captures": totals.get("captures", 0),
        "capture_s": round(float(totals.get("capture_s", 0.0)), 3),
        "capture_bytes": totals.get("capture_bytes", 0),
        "events": len(events),
    }

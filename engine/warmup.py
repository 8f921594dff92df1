"""The warm-up: a family's opening calls run before traffic, then the engine sealed.

The catalog is known before the first period (the declaration enumerates it), so a family drives
its model through the calls a conversation opens with while the replay engine captures their
graphs, and :func:`warm_and_seal` seals the engine after them: a capture after this point is a
bug, not a slow period. What to drive is the family's (Token2Wav's turn shapes, Moshi's opening and
steady frames under every replay arm); running the steps with their progress, waiting for the
device, sealing and the report are the same for every family and live here.

A class is captured at its ``warmup_calls + 1``-th sight (its first sight is the eager probe),
or at its first where its multiplexer lane already probed it (``lane_probe``). So a family may
hand one round of calls and ``rounds``: the round runs again only while the last one still
warmed a class (an eager warm-up call), and stops as soon as a round warmed none, since a
further round would then replay only. A lane's later session thus drives each call shape once.
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
    rounds: int = 1,
) -> dict[str, Any]:
    """Run ``steps`` in order, reporting ``("capture", fraction)`` after each, up to ``rounds``
    times while the round before warmed a class (see the module docstring); then
    ``restore`` (the model back to a conversation's start), wait for ``device``, seal the engine
    (if ``seal``: an arm that replays nothing has nothing to seal) and drain its counters and
    events, so the conversation's first period counts from zero.

    Returns what the warm-up did: ``seconds`` (the steps, the restore and the wait),
    ``steps`` (how many ran, over the rounds), ``eager_calls`` (every call that ran eagerly),
    ``eager_warmups`` (those that warmed a class for its capture, probes included),
    ``lane_probes`` (classes that took their lane's probe instead),
    ``captures``, ``capture_s``, ``capture_bytes`` and ``events`` (how many the warm-up
    recorded); the family adds what it drove (calls, frames, arms).
    """
    report("capture", 0.0)
    t0 = time.perf_counter()
    total = len(steps) * rounds
    ran = 0
    for _ in range(rounds):
        before = _warmups(replay)
        for step in steps:
            step()
            ran += 1
            report("capture", ran / total)
        if _warmups(replay) == before:
            break
    if ran < total:
        report("capture", 1.0)
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
        "steps": ran,
        "eager_calls": sum(totals["misses"].values()),
        "eager_warmups": totals["misses"].get("warmup", 0),
        "lane_probes": totals.get("lane_probes", 0),
        "captures": totals.get("captures", 0),
        "capture_s": round(float(totals.get("capture_s", 0.0)), 3),
        "capture_bytes": totals.get("capture_bytes", 0),
        "events": len(events),
    }


def _warmups(replay: ReplayEngine) -> int:
    """Eager warm-up calls so far (probes included)."""
    return int(replay.snapshot()["total"]["misses"].get("warmup", 0))

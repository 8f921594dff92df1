"""The Token2Wav warm-up: the common calls of a conversation, warmed and captured before traffic.

The catalog is known before the first period (the declaration enumerates it); the warm-up drives
the synthesizer through the call shapes a conversation opens with, so their graphs exist when
the user speaks, then seals the engine: a capture after this point is a bug, not a slow period.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from adapters.token2wav.speech import SpeechStream
from engine.replay import ReplayEngine
from engine.windows import TokenWindower

Progress = Callable[[str, float], None]


def warmup_turn(
    windower: TokenWindower, steady: int, seed: int, device: str, vocab: int
) -> list[Any]:
    """The calls of one turn: a full first window, ``steady`` windows, then the turn's end with
    the lookahead alone (a barge-in's last call), as the loop's windower makes them; tokens are
    seeded random below ``vocab``."""
    w = TokenWindower(windower.stride, windower.lookahead, windower.flush_min, windower.max_call)
    g = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> Tensor:
        return torch.randint(0, vocab, (1, n), generator=g, dtype=torch.int32).to(device)

    calls = w.push(tokens(w.window))
    for _ in range(steady):
        calls += w.push(tokens(w.stride))
    return calls + w.push(tokens(0), turn_end=True)


def warm_up(
    stream: SpeechStream,
    windower: TokenWindower,
    engine: ReplayEngine,
    *,
    steady_to_bound: int,
    vocab: int,
    seed: int,
    device: str,
    report: Progress,
) -> dict[str, Any]:
    """Warm and capture the classes of a conversation's common calls, then seal the engine.

    Two turn shapes, each twice (first sight warms, the second captures): one with
    ``steady_to_bound`` steady windows, enough that the attended extent reaches its bound
    (prompt + retained frames), one interrupted
    right after its flush. So flushes, steady windows at every extent and barge-in last calls
    replay from the first period; the rarer natural-end last calls (their size follows the
    answer's length) run eagerly, counted as ``sealed`` misses, instead of paying a capture
    mid-conversation.
    """
    calls = [
        call
        for steady in (steady_to_bound, 0)
        for call in warmup_turn(windower, steady, seed, device, vocab) * 2
    ]
    report("capture", 0.0)
    t0 = time.perf_counter()
    with torch.no_grad():
        for i, call in enumerate(calls):
            stream.push(call.tokens, call.last_chunk)
            if call.last_chunk:
                stream.reset()
            report("capture", (i + 1) / len(calls))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    if stream.arm.replay:
        engine.seal()
    totals = engine.snapshot()["total"]
    events = engine.drain_events()
    engine.reset_counters()
    return {
        "arm": str(stream.arm),
        "calls": len(calls),
        "seconds": round(time.perf_counter() - t0, 3),
        "captures": totals.get("captures", 0),
        "capture_s": round(float(totals.get("capture_s", 0.0)), 3),
        "capture_bytes": totals.get("capture_bytes", 0),
        "events": len(events),
    }

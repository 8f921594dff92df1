"""The Token2Wav warm-up: the common calls of a conversation, warmed and captured before traffic.

The catalog is known before the first period (the declaration enumerates it); the warm-up drives
the synthesizer through the call shapes a conversation opens with, so their graphs exist when
the user speaks; :func:`engine.warmup.warm_and_seal` runs them and seals the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from adapters.face import Progress
from adapters.token2wav.speech import SpeechStream
from engine.replay import ReplayEngine
from engine.warmup import warm_and_seal
from engine.windows import Call, TokenWindower


def warmup_turn(
    windower: TokenWindower, steady: int, seed: int, device: str, vocab: int
) -> list[Any]:
    """The calls of one turn: a full first window, ``steady`` windows, then the turn's end with
    the lookahead alone (a barge-in's last call), as the loop's windower makes them; tokens are
    seeded random below ``vocab``."""
    w = TokenWindower(
        stride=windower.stride,
        lookahead=windower.lookahead,
        flush_min=windower.flush_min,
        max_call=windower.max_call,
    )
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
    replay: ReplayEngine,
    *,
    steady_to_bound: int,
    vocab: int,
    seed: int,
    device: str,
    report: Progress,
) -> dict[str, Any]:
    """Warm and capture the classes of a conversation's common calls, then seal the engine.

    Two turn shapes: one with ``steady_to_bound`` steady windows, enough that the attended
    extent reaches its bound (prompt + retained frames), one interrupted right after its flush.
    So flushes, steady windows at every extent and barge-in last calls replay from the first
    period; the rarer natural-end last calls (their size follows the answer's length) run
    eagerly, counted as ``sealed`` misses, instead of paying a capture mid-conversation.

    The two turns are one round, run twice (first sight warms, the second captures) — or once
    where the session's multiplexer lane already probed every class (a later session on the
    lane: each class captures at its first sight, :mod:`engine.graph_lane`); a second round
    would then only replay.
    """
    calls = [
        call
        for steady in (steady_to_bound, 0)
        for call in warmup_turn(windower, steady, seed, device, vocab)
    ]

    def push(call: Call) -> Callable[[], None]:
        def run() -> None:
            stream.push(call.tokens, call.last_chunk)
            if call.last_chunk:
                stream.reset()

        return run

    with torch.no_grad():
        steps = [push(call) for call in calls]
        done = warm_and_seal(
            replay, steps, report=report, device=device, seal=stream.arm.replay,
            rounds=replay.warmup_calls + 1,
        )  # fmt: skip
    return {"arm": str(stream.arm), "calls": done["steps"], **done}

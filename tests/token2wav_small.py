"""A small Token2Wav flow for CPU tests: the real architecture at reduced width and depth.

Full size costs seconds per chunk on two CPU cores; these tests are about stream semantics and
exactness between arms, which do not depend on width. The GPU tests use the released sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from adapters.token2wav.binding import bind_flow
from adapters.token2wav.checkpoint import load_token2wav
from adapters.token2wav.config import SMALL_FLOW, FlowConfig
from adapters.token2wav.flow import CausalMaskedDiffWithXvec
from adapters.token2wav.stream import FlowStream
from engine.arms import Arm
from engine.replay import ReplayEngine

SMALL = SMALL_FLOW  # the app's ``small`` model size (adapters.token2wav.config)


@dataclass(frozen=True)
class Voice:
    """A seeded random voice prompt: tokens [1, n], mel [1, 2n, 80], x-vector [1, 192]."""

    tokens: Tensor
    mel: Tensor
    spk: Tensor

    @property
    def frames(self) -> int:
        return self.mel.shape[1]


def random_voice(prompt_tokens: int, seed: int, device: str = "cpu", vocab: int = 6561) -> Voice:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (1, prompt_tokens), generator=g, dtype=torch.int32)
    mel = torch.randn(1, 2 * prompt_tokens, 80, generator=g)
    spk = torch.randn(1, 192, generator=g)
    return Voice(tokens.to(device), mel.to(device), spk.to(device))


def small_flow(
    seed: int = 0, device: str = "cpu", config: FlowConfig = SMALL, envelope: bool = True
) -> CausalMaskedDiffWithXvec:
    flow, _ = load_token2wav(None, seed=seed, device=device, config=config, envelope=envelope)
    return flow


def make_stream(
    flow: CausalMaskedDiffWithXvec,
    voice: Voice,
    arm: Arm,
    replay: ReplayEngine | None = None,
    n_steps: int = 2,
    family: str = "minicpmo45",
) -> FlowStream:
    """``family``'s flow stream for ``voice`` under ``arm`` (a CPU replay engine by default);
    ``family`` is a family name or a declaration's name or path."""
    return FlowStream(
        flow,
        voice.tokens,
        voice.mel,
        voice.spk,
        binding=bind_flow(family, voice.frames, n_steps),
        arm=arm,
        replay=replay or ReplayEngine("cpu"),
    )


Call = tuple[Tensor | None, bool]
"""``(tokens [1, n], last_chunk)``, or ``(None, False)`` for a turn reset."""


def token_calls(pattern: list[int | str], seed: int, device: str = "cpu") -> list[Call]:
    """Expand a call pattern: an int n is a non-final call of n tokens, ``"last:n"`` a final
    one, ``"reset"`` a turn reset. Returns ``(tokens [1, n] | None, last_chunk)`` items."""
    g = torch.Generator().manual_seed(seed)
    calls: list[Call] = []
    for item in pattern:
        if item == "reset":
            calls.append((None, False))
            continue
        last = isinstance(item, str)
        n = int(str(item).split(":")[-1])
        tokens = torch.randint(0, 6561, (1, n), generator=g, dtype=torch.int32)
        calls.append((tokens.to(device), last))
    return calls


Output = tuple[Tensor, dict[str, Tensor]]
"""One call's mel and the stock state after it."""


def run_calls(stream: FlowStream, calls: list[Call]) -> list[Output]:
    """Every call of ``calls`` through ``stream`` (a reset where the pattern has one): each
    call's mel and the stock state after it."""
    outputs: list[Output] = []
    for tokens, last in calls:
        if tokens is None:
            stream.reset()
        else:
            outputs.append((stream.chunk(tokens, last), stream.stock_state()))
    return outputs


def exact_calls(stream: FlowStream, calls: list[Call], reference: list[Output]) -> int:
    """How many calls of ``calls`` through ``stream`` give ``reference``'s mel and stock state,
    bit for bit (each compared as it is made: one call's state held at a time)."""
    exact, outputs = 0, iter(reference)
    for tokens, last in calls:
        if tokens is None:
            stream.reset()
            continue
        mel, state = next(outputs)
        exact += torch.equal(mel, stream.chunk(tokens, last)) and all(
            torch.equal(state[k], v) for k, v in stream.stock_state().items()
        )
    return exact

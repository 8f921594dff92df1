"""Speech tokens to synthesis calls: the call pattern of a full-duplex speech model's decoder.

A backbone emits speech tokens at the token clock while it speaks; the synthesis stage consumes
them in windows. :class:`TokenWindower` turns the tokens of each native period into the calls
MiniCPM-o 4.5 makes (FACTS.md), with numbers taken from the declaration:

* **flush** — the turn's first call, as soon as ``flush_min`` tokens are there: up to
  ``max_call`` tokens (8–28 for MiniCPM-o, 4–13 for Lychee-FD); its last ``lookahead`` tokens are
  sent again with the next call.
* **steady** — then a window of ``stride + lookahead`` tokens (28 = 25 + 3; Lychee-FD 13 = 10 + 3)
  each time that many are pending, advancing ``stride``.
* **last** — at the turn's end (natural or barge-in) every pending token, lookahead included, with
  ``last_chunk=True``; the caller then resets the synthesizer to the prompt-only state.

A call never exceeds ``max_call`` tokens, so every call is one the declaration admits. The
windower holds no model state: it only buffers tokens (on their own device) between periods.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from torch import Tensor

from engine.contract import Declaration
from engine.declaration_io import load_declaration

__all__ = ["Call", "CallInfo", "CallKind", "TokenWindower"]


class CallKind(StrEnum):
    """Which rule made a synthesis call."""

    FLUSH = "flush"
    STEADY = "steady"
    LAST = "last"


@dataclass(frozen=True)
class CallInfo:
    """What a synthesis call was, as plain values (for the trace and the UI)."""

    kind: str
    tokens: int
    last_chunk: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tokens": self.tokens, "last_chunk": self.last_chunk}


@dataclass(frozen=True)
class Call:
    """One synthesis call: ``synthesizer.push(tokens, last_chunk)``; reset after a last call."""

    kind: CallKind
    tokens: Tensor  # (1, n) int32, a fresh tensor (never a view of the windower's buffer)
    last_chunk: bool

    @property
    def info(self) -> CallInfo:
        return CallInfo(str(self.kind), int(self.tokens.shape[1]), self.last_chunk)


class TokenWindower:
    """Buffers a turn's tokens and cuts them into flush / steady / last calls.

    Args (from the declaration: :meth:`from_declaration`):
        stride: tokens a steady call advances (25; Lychee-FD 10).
        lookahead: tokens each non-final call sends again with the next one (3).
        flush_min: fewest tokens of a turn's first non-final call (8; Lychee-FD 4).
        max_call: most tokens of any call (28 = stride + lookahead; Lychee-FD 13).
    """

    def __init__(self, *, stride: int, lookahead: int, flush_min: int, max_call: int) -> None:
        if stride < 1 or lookahead < 0:
            raise ValueError(
                f"stride={stride}, lookahead={lookahead}: need stride >= 1 and lookahead >= 0"
            )
        if not lookahead < flush_min <= max_call or max_call < stride + lookahead:
            raise ValueError(
                f"flush_min={flush_min}, max_call={max_call}: need lookahead < flush_min <= "
                f"max_call and max_call >= stride + lookahead ({stride + lookahead}); take them "
                "from the declaration with TokenWindower.from_declaration"
            )
        self.stride, self.lookahead = stride, lookahead
        self.flush_min, self.max_call = flush_min, max_call
        self._buffer: Tensor | None = None
        self._started = False
        self._device = torch.device("cpu")

    @classmethod
    def from_declaration(cls, declaration: Declaration | str) -> TokenWindower:
        """The windows a declaration states: ``stride_tokens``, ``lookahead``, ``calls.flush``."""
        decl = load_declaration(declaration) if isinstance(declaration, str) else declaration
        values = decl.values()
        missing = [k for k in ("stride_tokens", "lookahead") if k not in values]
        if missing or "flush" not in decl.calls or "tokens" not in decl.calls["flush"].ranges:
            raise ValueError(
                f"declaration {decl.name} lacks {missing or 'calls.flush.tokens'}: a windowed "
                "synthesizer declares stride_tokens, lookahead and calls.flush.tokens [low, high]"
            )
        low, high = decl.calls["flush"].bounds("tokens", values)
        return cls(
            stride=values["stride_tokens"],
            lookahead=values["lookahead"],
            flush_min=low,
            max_call=high,
        )

    @property
    def window(self) -> int:
        """Tokens of a steady call."""
        return self.stride + self.lookahead

    @property
    def pending(self) -> int:
        """Tokens received and not yet consumed (the lookahead included)."""
        return 0 if self._buffer is None else int(self._buffer.shape[1])

    @property
    def in_turn(self) -> bool:
        """True between a turn's first token and its last call."""
        return self._started or self.pending > 0

    def reset(self) -> None:
        """Drop pending tokens (a session reset; a turn's end goes through ``push``)."""
        self._buffer, self._started = None, False

    def push(self, tokens: Tensor, turn_end: bool = False) -> list[Call]:
        """The calls one period's ``tokens`` (1, n) make, in order; ``turn_end`` closes the turn.

        After a call with ``last_chunk=True`` the caller resets the synthesizer; the windower
        has already forgotten the turn.
        """
        if tokens.dim() != 2 or tokens.shape[0] != 1:
            raise ValueError(f"tokens must be (1, n), got {tuple(tokens.shape)}: one stream")
        self._device = tokens.device
        if tokens.shape[1]:
            self._append(tokens)
        calls: list[Call] = []
        if not self._started and self.pending >= self.flush_min and not self._fits_last(turn_end):
            calls.append(self._take(CallKind.FLUSH, min(self.pending, self.max_call)))
            self._started = True
        while self._started and self.pending >= self.window and not self._fits_last(turn_end):
            calls.append(self._take(CallKind.STEADY, self.window))
        if turn_end and (self._started or self.pending):
            calls.append(self._take(CallKind.LAST, self.pending, last=True))
            self.reset()
        return calls

    def _fits_last(self, turn_end: bool) -> bool:
        # At a turn's end, pending tokens that fit one call go out as the last call at once.
        return turn_end and self.pending <= self.max_call

    def _append(self, tokens: Tensor) -> None:
        tokens = tokens.to(torch.int32)
        self._buffer = tokens if self._buffer is None else torch.cat([self._buffer, tokens], 1)

    def _take(self, kind: CallKind, n: int, last: bool = False) -> Call:
        """A call of the first ``n`` pending tokens; a non-final call keeps its lookahead."""
        buffer = self._buffer
        if buffer is None:  # an empty last call only flushes the vocoder's held-back tail
            return Call(kind, torch.zeros(1, 0, dtype=torch.int32, device=self._device), last)
        # Fresh tensors with the canonical strides (n, 1): a plain clone of a view keeps the
        # buffer's row stride, and strides are part of every replay signature.
        window = buffer[:, :n].clone(memory_format=torch.contiguous_format)
        keep = n if last else n - self.lookahead
        rest = buffer[:, keep:].clone(memory_format=torch.contiguous_format)
        self._buffer = rest if rest.shape[1] else None
        return Call(kind, window, last)

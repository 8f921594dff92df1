"""MiniCPM-o 4.5's own call rule: its duplex object's speech tokens to Token2Wav calls.

The duplex object (``MiniCPMODuplex`` in the checkpoint's ``modeling_minicpmo.py``) hands each
speaking unit's speech tokens to its ``_generate_waveform_from_tokens(tokens, prompt_wav,
is_last_chunk, force_flush)``, which keeps a buffer that starts every turn with a silence prefix
of ``lookahead`` copies of token 4218 and calls its Token2wav so (numbers from our declaration:
stride 25, lookahead 3, flush calls 8..28 tokens):

* a flushing unit (``force_flush``: a turn's first unit in the public code; every unit in the
  unified code) — while at least ``flush_min`` (= lookahead + 5 = 8) tokens are pending: a call
  of ``min(max_call, pending)`` tokens that keeps its last ``lookahead`` tokens pending;
* any other unit — while a whole window (``stride + lookahead`` = 28) is pending: a window call
  that advances ``stride``;
* the turn's end (``is_last_chunk``) — after those, every pending token in one call with
  ``last_chunk=True`` (if any is pending), then a reset of the stream to the prompt-only state and
  of the buffer to the silence prefix.

:class:`DuplexWindower` is that rule with the unit's ``force_flush`` read from the backbone (the
flag the vendor computed, so both vendor variants are followed exactly). It differs from
:class:`~engine.windows.TokenWindower`'s pattern, which flushes once per turn, sends a turn's end
that fits one call as a single last call and flushes an empty vocoder tail: the vendor does
neither, and exactness of the calls is what we promise. A barge-in (the vendor's break event,
which makes no call at all) ends our turn with a last call of what is pending, as every family
here does, so our decoder is back at the prompt-only state for the next turn.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from engine.windows import Call, CallKind, TokenWindower

__all__ = ["SILENCE_TOKEN", "DuplexWindower"]

SILENCE_TOKEN = 4218
"""The speech token the vendor's duplex puts before every turn (``[4218] * 3``, FACTS.md)."""


class DuplexWindower(TokenWindower):
    """The vendor duplex's call rule (module docstring); a :class:`TokenWindower` in interface.

    Args:
        stride, lookahead, flush_min, max_call: the declaration's call pattern
            (:meth:`TokenWindower.from_declaration`).
        flushing: whether the unit just stepped was a flushing one (the backbone's flag).
    """

    def __init__(
        self,
        stride: int,
        lookahead: int,
        flush_min: int,
        max_call: int,
        *,
        flushing: Callable[[], bool],
    ) -> None:
        super().__init__(stride=stride, lookahead=lookahead, flush_min=flush_min, max_call=max_call)
        self._flushing = flushing
        self._spoken = False
        self.reset()

    @classmethod
    def like(cls, windower: TokenWindower, flushing: Callable[[], bool]) -> DuplexWindower:
        """The vendor rule with ``windower``'s numbers (read from the declaration)."""
        w = windower
        return cls(w.stride, w.lookahead, w.flush_min, w.max_call, flushing=flushing)

    @property
    def in_turn(self) -> bool:
        """True between a turn's first speech token and its last call."""
        return self._spoken

    def reset(self) -> None:
        """A fresh turn: the buffer holds the silence prefix only."""
        self._buffer = torch.full((1, self.lookahead), SILENCE_TOKEN, dtype=torch.int32)
        self._buffer = self._buffer.to(self._device)
        self._spoken = False

    def push(self, tokens: Tensor, turn_end: bool = False) -> list[Call]:
        """The calls one unit's ``tokens`` (1, n) make, in the vendor's order."""
        if tokens.dim() != 2 or tokens.shape[0] != 1:
            raise ValueError(f"tokens must be (1, n), got {tuple(tokens.shape)}: one stream")
        if tokens.device != self._device:
            self._device = tokens.device
            if self._buffer is not None:
                self._buffer = self._buffer.to(tokens.device)
        if tokens.shape[1]:
            self._append(tokens)
            self._spoken = True
        calls: list[Call] = []
        if self._flushing():
            while self.pending >= self.flush_min:
                calls.append(self._take(CallKind.FLUSH, min(self.pending, self.max_call)))
        else:
            while self.pending >= self.window:
                calls.append(self._take(CallKind.STEADY, self.window))
        if turn_end and self.pending:
            calls.append(self._take(CallKind.LAST, self.pending, last=True))
        if turn_end:
            self.reset()
        return calls

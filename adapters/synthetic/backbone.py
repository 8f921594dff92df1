"""A backbone that runs anywhere: real turn-taking, synthetic speech tokens.

:class:`SyntheticBackbone` conforms to ``engine.duplex.Backbone``. It hears the microphone through
silero-vad (:class:`~adapters.turns.vad.VoiceActivity`), decides who holds the floor with
:class:`~adapters.turns.taker.TurnTaker`, and while it speaks emits speech tokens from a tiny
seeded transformer (:class:`~adapters.synthetic.lm.TokenLM`) at the token clock:

* the turn's first speaking period: ``stride + lookahead`` tokens (25 + 3: a full first window);
* each later period: ``stride`` tokens (25), until the turn's seeded length (3–8 s of tokens) is
  reached; that period carries the remainder and ``turn_end``;
* a barge-in stops the turn at once: no tokens that period, ``turn_end`` and ``barge_in``, phase
  ``LISTEN`` (the loop closes the turn on ``turn_end``, whatever the phase).

``voice_prob`` is the period's highest window probability (a UI meter should not miss a word).
A period has at most one turn event (a turn never starts and ends inside one period; see
``TurnTaker``'s ``hold``). Determinism: turn ``k``'s length and tokens come from a generator
seeded by ``(seed, k)`` alone, the weights from ``seed``; the global torch RNG is never used, so
every arm sees the same tokens. The tokens are random, *not* speech: a real checkpoint's backbone
is what makes a synthesizer say words.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from adapters.synthetic.lm import LMConfig, TokenLM
from adapters.turns.taker import TurnEvent, TurnParams, TurnTaker
from adapters.turns.vad import RATE, WINDOW, VoiceActivity
from engine.duplex import Phase
from engine.windowed import BackboneStep

__all__ = ["SyntheticBackbone"]

_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant: spreads (seed, turn) over the seed space


def turn_seed(seed: int, turn: int) -> int:
    """The seed of turn ``turn``'s generator (lengths and tokens): a function of both alone."""
    return (seed * _MIX + turn + 1) % (1 << 63)


class SyntheticBackbone:
    """Listens with a real voice-activity model, speaks seeded random speech tokens.

    Args (the first four from the synthesizer's declaration):
        period_s: native period (1 s for the token2wav family).
        tokens_per_s: the token clock; ``tokens_per_s · period_s`` is the stride.
        lookahead: extra tokens of a turn's first period, so its first window is full.
        vocab: speech-token codes.
        input_rate: microphone rate; silero-vad's own (16 kHz, ``adapters.turns.vad.RATE``).
        device: where the emitted tokens live (the synthesizer's device); the model runs on CPU.
        seed: weights and every turn's generator.
        answer_s: (shortest, longest) answer in seconds of tokens; each turn draws one uniformly.
        turns: turn-taking thresholds (defaults: pause 0.6 s, barge-in 0.3 s, 0.5/0.35).
        lm: the token model's shape (d=128, 2 layers by default).
    """

    def __init__(
        self,
        *,
        period_s: float,
        tokens_per_s: float,
        lookahead: int,
        vocab: int,
        input_rate: int = RATE,
        device: str | torch.device = "cpu",
        seed: int = 0,
        answer_s: tuple[float, float] = (3.0, 8.0),
        turns: TurnParams | None = None,
        lm: LMConfig | None = None,
    ) -> None:
        if input_rate != RATE:
            raise ValueError(
                f"input_rate={input_rate}: silero-vad listens at {RATE} Hz; resample the "
                f"microphone to {RATE} (app/audio's DeviceSource does)"
            )
        stride = tokens_per_s * period_s
        if period_s <= 0 or lookahead < 0 or stride < 1 or abs(stride - round(stride)) > 1e-9:
            raise ValueError(
                f"tokens_per_s·period_s = {stride}, lookahead={lookahead}: need a whole number of "
                "tokens (>= 1) per period and lookahead >= 0; take both from the declaration"
            )
        low, high = answer_s
        self.answer_tokens = (math.ceil(low * tokens_per_s), math.floor(high * tokens_per_s))
        if not 1 <= self.answer_tokens[0] <= self.answer_tokens[1]:
            raise ValueError(f"answer_s={answer_s}: need 0 < shortest <= longest (seconds)")
        self.period_s, self.input_rate = period_s, input_rate
        self.stride, self.lookahead = round(stride), lookahead
        self.device, self.seed = torch.device(device), seed
        self.turn_params = turns or TurnParams()
        if abs(self.turn_params.window_s - WINDOW / RATE) > 1e-12:
            raise ValueError(
                f"TurnParams.window_s={self.turn_params.window_s}: silero-vad gives one "
                f"probability per {WINDOW / RATE} s; leave window_s at its default"
            )
        longest = self.answer_tokens[1] + 1  # + BOS
        lm_config = lm or LMConfig(vocab=vocab, max_len=longest)
        if lm_config.vocab != vocab or lm_config.max_len < longest:
            raise ValueError(
                f"lm config (vocab {lm_config.vocab}, max_len {lm_config.max_len}) must have "
                f"vocab={vocab} and max_len >= {longest} for answers of up to {high} s"
            )
        self.vad = VoiceActivity()
        self.taker = TurnTaker(self.turn_params)
        self.lm = TokenLM(lm_config, seed)
        self.reset()

    @property
    def speaking(self) -> bool:
        """True while the assistant holds the turn."""
        return self.taker.speaking

    def reset(self) -> None:
        """A fresh conversation: VAD state, floor, turn count (the weights stay)."""
        self.vad.reset()
        self.taker.reset()
        self.turn = 0  # turns started so far; the next one is seeded by (seed, turn)
        self.remaining = 0  # tokens left in the current turn
        self._generator = torch.Generator()

    def step(self, mic: np.ndarray) -> BackboneStep:
        """Hear one period of ``mic`` (float32 mono at 16 kHz) and decide: listen or speak."""
        probs = self.vad.push(mic)
        was_speaking = self.taker.speaking
        event = TurnEvent.NONE
        for prob in probs.tolist():
            happened = self.taker.update(prob, hold=event is not TurnEvent.NONE)
            event = happened if happened is not TurnEvent.NONE else event
        voice = float(probs.max()) if probs.size else 0.0
        if was_speaking and event is TurnEvent.BARGE_IN:
            self.remaining = 0
            return BackboneStep(Phase.LISTEN, self._tokens(0), True, True, voice)
        if not was_speaking and event is TurnEvent.TAKE:
            n = self._start_turn()
        elif was_speaking:
            n = self.stride
        else:
            return BackboneStep(Phase.LISTEN, self._tokens(0), False, False, voice)
        tokens = self._tokens(min(n, self.remaining))
        ended = self.remaining == 0
        if ended:
            self.taker.finish()
        return BackboneStep(Phase.SPEAK, tokens, ended, False, voice)

    def _start_turn(self) -> int:
        """Seed the turn, draw its length; the first period's token count (a full window)."""
        self._generator = torch.Generator().manual_seed(turn_seed(self.seed, self.turn))
        self.turn += 1
        low, high = self.answer_tokens
        self.remaining = int(torch.randint(low, high + 1, (1,), generator=self._generator))
        self.lm.start()
        return self.stride + self.lookahead

    def _tokens(self, n: int) -> torch.Tensor:
        """``n`` tokens of the turn as (1, n) int32 on the synthesizer's device."""
        if n == 0:
            return torch.zeros(1, 0, dtype=torch.int32, device=self.device)
        self.remaining -= n
        sampled = self.lm.sample(n, self._generator)
        return sampled.to(torch.int32).view(1, n).to(self.device)

"""The TTS head's speech tokens with one replayed graph and one host read a token.

The vendor's ``MiniCPMTTS.generate_chunk`` (``modeling_minicpmo.py``) makes a unit's speech
tokens one at a time: the condition through its Llama (``t = 0``), then per token the previous
token's embedding (``emb_code[0]``), a position uploaded from the host, the Llama step, the
heads (``head_code``, weight-normed, under ``P.cached()``) into float logits, ``/ temperature``,
its repetition processor (``CustomRepetitionPenaltyLogitsProcessorRepeat``: counts of the last
``past_window`` tokens of this chunk by ``one_hot``, ``penalty ** count`` multiplied into
negative scores and divided out of the others), ``-inf`` on the eos token while ``t <
min_new_tokens``, ``softmax``, ``multinomial``, and two host reads (``finish.any()`` /
``finish.all()``) to stop.

:class:`SpeechTokens` runs the same ops in the same order; a token ``t >= 1`` is one call
(operator ``tts.token``) of :meth:`SpeechTokens.token` on state that lives on the device: the
previous token, its position and carry slot (both advanced by the call), and the chunk's
:class:`Draw`: its temperature and a ring of its last ``past_window`` tokens (``taken``: how many)
whose ``one_hot`` counts equal the vendor's on its slice (the ring's empty slots count in an
extra column that is cut off). The
host reads the token once (the stop test) and writes it into the chunk's tokens. The draws are
the vendor's, one per step, so the generator follows the vendor's without any rewind. ``t = 0``
(the condition, whose length varies) runs the Llama through the model's forward (the rules'
``tts.step`` or the vendor's) and the same head and sampling code eagerly.

The processor's numbers (penalty, window) are read from the vendor's own ``gen_logits``, the
eos token from the call, the temperature is the call's tensor.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
import torch.nn.utils.parametrize as P
from torch import Tensor

from adapters.minicpmo45.llm_step import CarryStep

__all__ = ["Draw", "SpeechTokens", "repetition_processor"]


def repetition_processor(tts: Any, penalty: float) -> tuple[float, int] | None:
    """``(penalty, past_window)`` of the repetition processor the vendor's ``gen_logits`` (in
    the TTS head's own module) makes for ``penalty``; None when it makes none or another kind."""
    gen_logits = getattr(sys.modules.get(type(tts).__module__), "gen_logits", None)
    if gen_logits is None:
        return None
    _, processors = gen_logits(
        num_code=int(tts.config.num_audio_tokens), repetition_penalty=penalty
    )
    if not processors:
        return (1.0, 0)
    if len(processors) != 1 or type(processors[0]).__name__ != (
        "CustomRepetitionPenaltyLogitsProcessorRepeat"
    ):
        return None
    proc = processors[0]
    return float(proc.penalty), int(proc.past_window)


class Draw(NamedTuple):
    """How one speech token is drawn: the chunk's device state and the processor's numbers.

    A tuple, so the replay keys it as one argument (its tensors, the contract's own, at fixed
    addresses: :class:`SpeechTokens` holds them for the whole conversation; the scalars are
    part of the signature)."""

    temperature: Tensor
    """``[1, 1]`` float32: the call's temperature (copied in by :meth:`SpeechTokens.start`)."""
    ring: Tensor
    """``[num_vq, past_window]``: the chunk's last tokens (``num_audio_tokens`` when empty)."""
    taken: Tensor
    """``[]`` int64: tokens the ring has taken this chunk."""
    penalty: float
    """The repetition processor's penalty."""
    penalize: bool
    """Whether the processor runs (the vendor's: not on the first token, not at penalty 1)."""
    mask_eos: bool
    """Whether eos is ``-inf`` (``force_no_stop`` or ``t < min_new_tokens``)."""


class SpeechTokens:
    """The TTS head's token loop over its carry (module docstring).

    Args:
        tts: the vendor's TTS head (``emb_code``, ``head_code``, ``num_vq``, ``num_audio_tokens``).
        step: the Llama step over the TTS carry (the rules' ``tts.step`` function).
        buffer: the TTS carry's buffer.
        window: the repetition processor's ``past_window``.
    """

    def __init__(self, tts: Any, step: CarryStep, buffer: Tensor, window: int) -> None:
        self.tts, self.step, self.buffer = tts, step, buffer
        self.vq, self.vocab = int(tts.num_vq), int(tts.num_audio_tokens)
        self.window = max(window, 1)
        device = buffer.device
        self.prev = torch.zeros(1, 1, dtype=torch.int64, device=device)
        self.position = torch.zeros(1, 1, dtype=torch.int64, device=device)
        self.slot = torch.zeros(1, dtype=torch.int64, device=device)
        self.ring = torch.full((self.vq, self.window), self.vocab, dtype=torch.int64, device=device)
        self.taken = torch.zeros((), dtype=torch.int64, device=device)
        self.temperature = torch.ones(1, 1, dtype=torch.float32, device=device)
        self.eos = torch.zeros(self.vocab, dtype=torch.bool, device=device)
        self.cols = torch.arange(self.vocab, device=device)

    def start(self, eos_token: Tensor, temperature: Tensor) -> None:
        """A chunk: its eos mask and temperature (``[1, 1]``, the vendor's form), an empty ring."""
        self.eos.copy_((self.cols == eos_token.view(-1, 1)).any(0))
        self.temperature.copy_(temperature)
        self.ring.fill_(self.vocab)
        self.taken.zero_()

    def draw(self, penalty: float, penalize: bool, mask_eos: bool) -> Draw:
        """The :class:`Draw` over this object's temperature, ring and taken count."""
        return Draw(self.temperature, self.ring, self.taken, penalty, penalize, mask_eos)

    def place(self, position: int, slot: int) -> None:
        """Where the next :meth:`token` call writes (after ``t = 0``: two small uploads)."""
        self.position.fill_(position)
        self.slot.fill_(slot)

    def sample(self, hidden: Tensor, draw: Draw) -> Tensor:
        """The vendor's heads and sampling on ``hidden [1, L, H]``: ``[1, num_vq]`` ids; the
        draw's ring takes them."""
        tts = self.tts
        with P.cached():
            logits = torch.empty(
                hidden.size(0), hidden.size(1), self.vocab, self.vq,
                dtype=torch.float, device=hidden.device,
            )  # fmt: skip
            for i in range(self.vq):
                logits[..., i] = tts.head_code[i](hidden)
        logits = logits[:, -1].float().permute(0, 2, 1).reshape(-1, self.vocab)
        logits /= draw.temperature
        if draw.penalize:
            freq = F.one_hot(draw.ring, self.vocab + 1).sum(1)[:, : self.vocab]
            alpha = torch.pow(draw.penalty, freq)
            scores = logits.contiguous()
            logits = torch.where(scores < 0, scores.multiply(alpha), scores.divide(alpha))
        if draw.mask_eos:
            logits = logits.masked_fill(self.eos, -torch.inf)
        scores = F.softmax(logits, dim=-1)
        token = torch.multinomial(scores, num_samples=1).view(-1, self.vq)
        slot = torch.remainder(draw.taken, self.window).view(1, 1).expand(self.vq, 1)
        draw.ring.scatter_(1, slot, token.view(self.vq, 1))
        draw.taken.add_(1)
        return token

    def token(
        self, prev: Tensor, position: Tensor, slot: Tensor, buffer: Tensor, draw: Draw, extent: int
    ) -> Tensor:
        """One token ``t >= 1``: ``emb_code[0](prev)``, the Llama step at ``position`` / ``slot``
        of ``buffer`` attending its first ``extent`` slots, :meth:`sample`; advances ``prev``,
        ``position`` and ``slot``."""
        x = self.tts.emb_code[0](prev)
        hidden = self.step.hidden(x, position, slot, buffer, extent)
        token = self.sample(hidden, draw)
        prev.copy_(token[:, :1])
        position.add_(1)
        slot.add_(1)
        return token

    def tokens(
        self,
        prev: Tensor,
        position: Tensor,
        slot: Tensor,
        buffer: Tensor,
        draw: Draw,
        extent: int,
        count: int,
    ) -> Tensor:
        """``count`` tokens, each one :meth:`token` call (the same ops and draws in the same
        order): ``[count, num_vq]``. Only for a stretch where the vendor cannot stop (eos masked
        throughout) and one extent holds every slot it writes."""
        return torch.cat(
            [self.token(prev, position, slot, buffer, draw, extent) for _ in range(count)]
        )

"""The LLM's per-token sampling on the device: the vendor's ``StreamDecoder.decode``, no host work.

The vendor's ``decode`` (``MiniCPMO45/utils.py``) picks each text token with host control flow
around small device ops: ``.item()`` after the chunk-eos draw, a Python loop of ``logits[0, id]
/= penalty`` over the unique ids of the last ``text_repetition_window_size`` generated tokens
(one indexing kernel pair each), a host branch on the sign of ``<|turn_eos|>``'s logit, and the
top-k / top-p filter's boolean indexing (each a device-to-host sync for its ``nonzero``).
:class:`DeviceDecode` is the same function with the same ops in the same order, every branch a
device ``where`` and every boolean index a mask, so one call has fixed shapes, reads nothing on
the host and can be replayed as one graph (operator ``llm.sample``):

1. ``logits.clone()``; the chunk-eos draw: ``multinomial(softmax(logits[0]))`` (``argmax`` when
   greedy);
2. the forbidden ids to ``-inf`` (a mask made at load: the same values, no index upload);
3. the repetition penalty: the recent ids live in a device ring of the vendor's window size
   (read from ``decode``'s own default), written by this step itself; their mask (a ``scatter``
   of the ring) selects ``logits / penalty`` over ``logits`` — the division the vendor applies
   to each of those entries, by the same kernel (a tensor by a host scalar);
4. the length penalty on ``<|turn_eos|>``: ``where(x > 0, x / p, x * p)``, the vendor's two
   branches; the listen scale as the vendor's in-place product;
5. greedy: ``argmax``; sampling: ``/ temperature``, top-k as ``masked_fill`` of the vendor's
   mask, top-p with the vendor's sort / softmax / cumsum / shift and the removed set scattered
   back to vocabulary order, then ``softmax`` and the final ``multinomial`` draw;
6. the id: chunk-eos if the first draw took it, else the final one; the ring takes it when the
   vendor's ``generated_tokens`` would (the normal path and not a special id).

Randomness: both draws are the default generator's (on CUDA a replayed graph advances the
Philox offset as eager does). The vendor draws the second time only when the first did not take
chunk-eos; this step always draws twice, so after a chunk-eos :meth:`DeviceDecode.rewind` puts
the generator back where the vendor's is: the state before the step, advanced by the first
draw's own consumption (an ``exponential_`` of the first draw's shape, what ``multinomial``
draws inside). The host reads one ``int64`` per token (:meth:`DeviceDecode.__call__`'s result).

Not covered (the vendor's own ``decode`` runs, counted by the rules): ``listen_top_k`` (its
early listen return updates the decoder's text context), another repetition window than the
ring's, a mode other than ``sampling`` / ``greedy``.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["MODES", "DeviceDecode", "decode_defaults"]

MODES = ("sampling", "greedy")

PARAMS = (
    "temperature",
    "top_k",
    "top_p",
    "listen_prob_scale",
    "text_repetition_penalty",
    "text_repetition_window_size",
    "length_penalty",
)
"""``decode``'s keyword parameters that :class:`DeviceDecode` follows (its signature's names)."""


def decode_defaults(decode: Any) -> dict[str, Any]:
    """The defaults of the vendor's ``decode(logits, mode, ...)`` for :data:`PARAMS` (and
    ``mode``, ``listen_top_k``): what the catalog lists and the ring's size."""
    params = inspect.signature(decode).parameters
    names = ("mode", "listen_top_k", *PARAMS)
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError(
            f"the checkpoint's StreamDecoder.decode has no {', '.join(missing)}: choose the "
            "MiniCPM-o-4_5 code as released"
        )
    return {n: params[n].default for n in names}


class DeviceDecode:
    """The vendor's ``decode`` on the device for one decoder (module docstring).

    Args:
        decoder: the vendor's ``StreamDecoder`` (ids: ``chunk_eos_id``, ``turn_eos_id``,
            ``listen_id``, ``forbidden_token_ids``, ``special_token_ids``; ``generated_tokens``).
        vocab: the LM head's width.
        window: the repetition window (the ring's slots).
        device: where the LLM runs.
    """

    def __init__(self, decoder: Any, vocab: int, window: int, device: torch.device) -> None:
        if window <= 0:
            raise ValueError(f"repetition window {window}: must be > 0")
        self.decoder, self.vocab, self.window, self.device = decoder, vocab, window, device
        self.eos = int(decoder.chunk_eos_id)
        self.turn_eos = int(decoder.turn_eos_id)
        self.listen = int(decoder.listen_id)
        self.forbidden = torch.zeros(1, vocab, dtype=torch.bool, device=device)
        self.forbidden[:, [int(i) for i in decoder.forbidden_token_ids]] = True
        self.special = torch.tensor(
            sorted({int(i) for i in decoder.special_token_ids}), dtype=torch.int64, device=device
        )
        self.ring = torch.full((window,), -1, dtype=torch.int64, device=device)
        self.count = torch.zeros((), dtype=torch.int64, device=device)
        self.mirrored: tuple[int, int] = (0, -1)
        """``(id, length)`` of the decoder's host list the ring mirrors (a warm-up restores it)."""

    # -- the step (capturable) --------------------------------------------------------------

    def step(
        self,
        logits: Tensor,
        ring: Tensor,
        count: Tensor,
        mode: str,
        temperature: float,
        top_k: int,
        top_p: float,
        listen_prob_scale: float,
        penalty: float,
        length_penalty: float,
    ) -> Tensor:
        """The id ``[1]`` (int64) the vendor's ``decode`` returns for ``logits [1, vocab]``;
        writes it into ``ring`` / ``count`` when the vendor would append it."""
        logits = logits.clone()
        if mode == "greedy":
            first = torch.argmax(logits[0]).view(1)
        else:
            first = torch.multinomial(F.softmax(logits[0], dim=-1), num_samples=1)
        eos = first == self.eos
        logits = logits.masked_fill(self.forbidden, float("-inf"))  # the vendor's assignment
        if penalty != 1.0:
            valid = (ring >= 0) & (ring < logits.size(-1))
            at = torch.where(valid, ring, logits.size(-1))
            seen = torch.zeros(logits.size(-1) + 1, dtype=torch.bool, device=logits.device)
            seen = seen.scatter(0, at, True)[: logits.size(-1)].unsqueeze(0)
            scaled = logits / penalty if penalty > 1.0 else logits * (1.0 / penalty)
            logits = torch.where(seen, scaled, logits)
        if length_penalty != 1.0:
            x = logits[0, self.turn_eos]
            logits[0, self.turn_eos] = torch.where(x > 0, x / length_penalty, x * length_penalty)
        if listen_prob_scale != 1.0:
            logits[0, self.listen] *= listen_prob_scale
        if mode == "greedy":
            final = torch.argmax(logits, dim=-1)
        else:
            logits = _top_k_top_p(logits / temperature, top_k, top_p)
            final = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1).squeeze(1)
        token = torch.where(eos, first, final)
        keep = ~eos & ~(token.unsqueeze(-1) == self.special).any(-1)  # no isin: it may sort
        slot = torch.remainder(count, ring.numel()).view(1)
        ring.index_copy_(0, slot, torch.where(keep, token, ring.index_select(0, slot)))
        count.add_(keep.view(()).to(count.dtype))
        return token

    # -- the host side ----------------------------------------------------------------------

    def mirror(self) -> bool:
        """Make the ring the vendor's recent ids if the decoder's list is not what it mirrors (a
        reset, a new conversation, a decode the vendor ran); True when it was rebuilt."""
        tokens = self.decoder.generated_tokens
        if self.mirrored == (id(tokens), len(tokens)):
            return False
        recent = [int(t) for t in tokens[-self.window :]]
        self.ring.fill_(-1)
        if recent:
            self.ring[: len(recent)].copy_(torch.tensor(recent, dtype=torch.int64))
        self.count.fill_(len(recent))
        self.mirrored = (id(tokens), len(tokens))
        return True

    def forget(self) -> None:
        """Rebuild the ring from the decoder's list at the next :meth:`mirror`."""
        self.mirrored = (0, -1)

    def took(self, token: int, eos: bool) -> None:
        """The vendor's bookkeeping for the token the step returned (host lists)."""
        if eos:
            return
        dec = self.decoder
        if token not in dec.special_token_ids:
            dec.generated_tokens.append(token)
        else:
            dec.generated_special_tokens.append(token)
        self.mirrored = (id(dec.generated_tokens), len(dec.generated_tokens))

    def rng_state(self) -> Tensor:
        """The default generator's state (before a sampling step)."""
        if self.device.type == "cuda":
            return torch.cuda.get_rng_state(self.device)
        return torch.get_rng_state()

    def rewind(self, state: Tensor, like: Tensor) -> None:
        """After a chunk-eos: the generator as the vendor leaves it (its one draw only)."""
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state, self.device)
        else:
            torch.set_rng_state(state)
        torch.empty(like.shape[-1], dtype=like.dtype, device=like.device).exponential_(1)


def _top_k_top_p(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """The vendor's ``top_k_top_p_filtering`` with its boolean indexing as masks."""
    logits = logits.clone()
    if top_k > 0:
        k = min(top_k, logits.size(-1))
        logits = logits.masked_fill(logits < torch.topk(logits, k)[0][..., -1, None], -float("inf"))
    if top_p > 0.0:
        ordered, order = torch.sort(logits, descending=True)
        remove = torch.cumsum(F.softmax(ordered, dim=-1), dim=-1) > top_p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = 0
        logits = logits.masked_fill(
            torch.zeros_like(remove).scatter(-1, order, remove), -float("inf")
        )
    return logits

"""The backbone rules' token loops: the LLM's sampling and the TTS head's tokens on the device.

:class:`SamplingRules` is the part of :class:`~adapters.minicpmo45.rules.BackboneRules` that
replaces the vendor's per-token host loops under a replaying arm (eager and S keep the vendor's
own code, so every arm = eager compares the two):

* ``decoder.decode`` by ``llm.sample`` (:class:`~.sample.DeviceDecode`) and ``decoder.embed_token``
  by a gather of the id just sampled from its device copy;
* ``tts.generate_chunk`` by the vendor's loop with ``tts.token``
  (:class:`~.tts_sample.SpeechTokens`) for every token after the condition's.

One host read a token in each; what they cannot follow runs the vendor's code, counted.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from adapters.minicpmo45.kv import CarryView, KVCarry
from adapters.minicpmo45.llm_step import CarryStep
from adapters.minicpmo45.sample import MODES, PARAMS, DeviceDecode, decode_defaults
from adapters.minicpmo45.tts_sample import SpeechTokens, repetition_processor
from engine.arms import Arm
from engine.replay import ReplayEngine, ReplayOp
from engine.signature import Catalog, TensorSpec

__all__ = ["Ahead", "SamplingRules"]


class Ahead(NamedTuple):
    """A decode step launched before its id was read (:meth:`SamplingRules._read_ahead`)."""

    tid: int
    embeds: Tensor
    start: int
    out: tuple[Tensor, Tensor]


class SamplingRules:
    """The token loops of :class:`~adapters.minicpmo45.rules.BackboneRules` (module docstring)."""

    duplex: Any
    decoder: Any
    replay: ReplayEngine
    arm: Callable[[], Arm]
    device: torch.device
    backend: str
    vendor: bool
    ops: dict[str, ReplayOp]
    fallbacks: Counter[str]
    sampled: dict[str, int]
    llm_carry: KVCarry
    tts_step: CarryStep | None
    tts_carry: KVCarry | None
    tts_view: CarryView
    sampler: DeviceDecode | None
    speech: SpeechTokens | None
    _last: tuple[int, Tensor] | None
    _ahead: Ahead | None
    llm_view: CarryView
    _decode_defaults: dict[str, Any]
    _tts_penalty: tuple[float, int]
    _tts_block: int

    def _vendor(self, obj: Any, name: str) -> Any:
        raise NotImplementedError

    def _timed(self, stage: str) -> Callable[[Any], Any]:
        raise NotImplementedError

    def _run(self, name: str, *args: Any) -> Any:
        raise NotImplementedError

    # -- the LLM's sampling -------------------------------------------------------------------

    def _sampler(self, llm: Any, dtype: torch.dtype) -> None:
        """``llm.sample``: the vendor's ``decode`` on the device (:mod:`.sample`), its catalog
        the vendor's own defaults in both modes."""
        dec = self.decoder
        defaults = decode_defaults(dec.decode)
        if int(dec.chunk_eos_id) not in {int(i) for i in dec.forbidden_token_ids}:
            self.fallbacks["sample_eos_not_forbidden"] += 1  # the vendor always forbids it
            return
        vocab = int(llm.lm_head.weight.shape[0])
        window = int(defaults["text_repetition_window_size"])
        self.sampler = sampler = DeviceDecode(dec, vocab, window, self.device)
        self._decode_defaults = defaults
        logits = TensorSpec((1, vocab), dtype, self.device)
        catalog = Catalog.of_calls(
            (logits, sampler.ring, sampler.count, mode, *self._sample_params(defaults))
            for mode in MODES
        )
        self.ops["llm.sample"] = self.replay.register(
            "llm.sample", sampler.step, aliased=["ring", "count"], catalog=catalog
        )

    @staticmethod
    def _sample_params(params: dict[str, Any]) -> tuple[Any, ...]:
        """The step's scalar arguments, in :meth:`DeviceDecode.step`'s order."""
        names = [n for n in PARAMS if n != "text_repetition_window_size"]
        return tuple(params[n] for n in names)

    def _decode(self, logits: Tensor, mode: str = "sampling", **kwargs: Any) -> Tensor:
        """The decoder's ``decode``: on the device under a replaying arm (one host read a
        token), else the vendor's own."""
        vendor = self._vendor(self.decoder, "decode")
        sampler = self.sampler
        if sampler is None or not self.arm().replay:
            self._last, self._ahead = None, None
            return vendor(logits, mode=mode, **kwargs)  # type: ignore[no-any-return]
        params = self._decode_defaults | kwargs | {"mode": mode}
        refused = (
            "listen_top_k" if params["listen_top_k"] is not None
            else "mode" if mode not in MODES
            else "repetition_window" if params["text_repetition_window_size"] != sampler.window
            else "logits" if tuple(logits.shape) != (1, sampler.vocab)
            else ""
        )  # fmt: skip
        if refused:
            self.fallbacks[f"sample_{refused}"] += 1
            sampler.mirror()
            return vendor(logits, mode=mode, **kwargs)  # type: ignore[no-any-return]
        if sampler.mirror():
            self.sampled["ring_rebuilt"] += 1
        state = sampler.rng_state() if mode == "sampling" else None
        token = self.ops["llm.sample"](
            logits, sampler.ring, sampler.count, mode, *self._sample_params(params)
        )
        tid = self._read_ahead(token)  # the token's one host read, the next step under way
        eos = tid == sampler.eos
        if eos and state is not None:
            sampler.rewind(state, logits)
            self.sampled["rewinds"] += 1
        sampler.took(tid, eos)
        self.sampled["tokens"] += 1
        self.sampled["host_reads"] += 1
        self._last = (tid, token)
        return torch.tensor([tid])

    def _embed_token(self, tid: Any) -> Tensor:
        """The vendor's ``embed_token``; the id just sampled is gathered from its device copy
        (no upload)."""
        last, ahead = self._last, self._ahead
        if last is not None and isinstance(tid, int) and tid == last[0]:
            if ahead is not None and ahead.tid == tid:
                return ahead.embeds  # the look-ahead's own input (_feed knows it by identity)
            out: Tensor = self.decoder.m.model.embed_tokens(last[1])
            return out
        return self._vendor(self.decoder, "embed_token")(tid)  # type: ignore[no-any-return]

    def _read_ahead(self, token: Tensor) -> int:
        """The sampled id on the host, with the next decode step launched before the read.

        The vendor's loop reads the id, checks it on the host and then feeds its embedding; the
        device would idle through that host work. So the step for the id as sampled (its
        embedding gathered on the device, as :meth:`_embed_token` does, at the next slot and
        the extent a feed of one there gets) is launched first, and the read waits for the
        sampler alone (a copy to pinned memory and its event on CUDA). :meth:`_feed` hands the
        result over when the vendor feeds that very embedding at that slot; any other call
        (a replaced id, a stop, the window's upkeep, a reset) runs as before and the slot the
        look-ahead wrote is dead (beyond the live length: the next write there comes first).
        The same ops on the same inputs in the same order on the device: nothing changes a bit.
        """
        self._ahead = None
        carry = self.llm_carry
        cuda = token.device.type == "cuda"
        if cuda:
            host = torch.empty(token.shape, dtype=token.dtype, pin_memory=True)
            host.copy_(token, non_blocking=True)
            done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            done.record()
        if self.decoder.cache is self.llm_view and carry.fits(1):
            embeds = self.decoder.m.model.embed_tokens(token)
            start, extent = carry.length, carry.extent(1)
            positions = torch.arange(start, start + 1, device=token.device).unsqueeze(0)
            with torch.no_grad():
                out = self._run("llm.step", embeds.unsqueeze(0), positions, positions[0],
                                carry.buffer, extent)  # fmt: skip
            self._ahead = Ahead(-1, embeds, start, out)
        if cuda:
            done.synchronize()
            tid = int(host.item())
        else:
            tid = int(token.item())
        if self._ahead is not None:
            self._ahead = self._ahead._replace(tid=tid)
        return tid

    def _take_ahead(self, embeds: Tensor, return_logits: bool) -> tuple[Tensor, Tensor] | None:
        """The look-ahead's ``(logits, hidden)`` if this feed is the one it ran, else None (and
        the look-ahead is dropped either way); counted in ``sampled``."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if (
            embeds is ahead.embeds and return_logits and self.llm_carry.length == ahead.start
            and self.decoder.cache is self.llm_view and self.arm().replay
        ):  # fmt: skip
            self.llm_carry.length = ahead.start + 1
            self.sampled["ahead_used"] += 1
            return ahead.out
        self.sampled["ahead_dropped"] += 1
        return None

    # -- the TTS head's tokens --------------------------------------------------------------

    def _speech_tokens(self, tts: Any, dtype: torch.dtype) -> None:
        """``tts.token``: one speech token per replay (:mod:`.tts_sample`), for the duplex
        object's repetition penalty as the vendor's ``gen_logits`` makes it."""
        penalty = getattr(self.duplex, "tts_repetition_penalty", None)
        proc = repetition_processor(tts, float(penalty)) if penalty is not None else None
        if proc is None or self.tts_step is None or self.tts_carry is None:
            self.fallbacks["tts_tokens_unknown_processor"] += 1
            return
        self._tts_penalty = proc
        self.speech = sp = SpeechTokens(tts, self.tts_step, self.tts_carry.buffer, proc[1])
        catalog = Catalog.of_calls(
            (sp.prev, sp.position, sp.slot, sp.buffer, sp.draw(proc[0], proc[0] != 1.0, mask), e)
            for mask in (False, True)
            for e in self.tts_carry.extents
        )
        self.ops["tts.token"] = self.replay.register(
            "tts.token", sp.token, catalog=catalog, extra_key=lambda: self.backend,
            aliased=["prev", "position", "slot", "buffer", "draw"],
        )  # fmt: skip
        if self._tts_block > 0:
            block = Catalog.of_calls(
                (sp.prev, sp.position, sp.slot, sp.buffer, sp.draw(proc[0], proc[0] != 1.0, True),
                 e, self._tts_block)
                for e in self.tts_carry.extents
            )  # fmt: skip
            self.ops["tts.tokens"] = self.replay.register(
                "tts.tokens", sp.tokens, catalog=block, extra_key=lambda: self.backend,
                aliased=["prev", "position", "slot", "buffer", "draw"],
            )  # fmt: skip

    def _generate_chunk(self, *args: Any, **kwargs: Any) -> Any:
        """The TTS head's ``generate_chunk``: ours under a replaying arm, else the vendor's."""
        tts = self.duplex.model.tts
        vendor = self._vendor(tts, "generate_chunk")
        if self.speech is None or self.vendor or not self.arm().replay:
            return vendor(*args, **kwargs)
        call = inspect.signature(vendor).bind(*args, **kwargs)
        call.apply_defaults()
        a = call.arguments
        known = float(a["repetition_penalty"]) == self._tts_penalty[0]
        known = known and a["temperature"].numel() == 1
        if not known or int(a["inputs_embeds"].shape[0]) != 1 or int(a["max_new_token"]) < 1:
            self.fallbacks["tts_tokens_other_call"] += 1
            return vendor(*args, **kwargs)
        with torch.inference_mode():
            return self._speech_chunk(tts, a)

    def _speech_chunk(self, tts: Any, a: dict[str, Any]) -> tuple[Tensor, Any]:
        """The vendor's ``generate_chunk`` loop with :class:`SpeechTokens` (one host read a
        token)."""
        sp, carry = self.speech, self.tts_carry
        assert sp is not None and carry is not None
        x: Tensor = a["inputs_embeds"]
        device = x.device
        eos_token = a["eos_token"].to(device)
        temperature = a["temperature"].unsqueeze(0).expand(1, -1).contiguous().view(-1, 1)
        temperature = temperature.to(device)
        start, n, most = int(a["text_start_pos"]), int(x.shape[1]), int(a["max_new_token"])
        least, no_stop = int(a["min_new_tokens"]), bool(a["force_no_stop"])
        penalty, penalize = self._tts_penalty[0], self._tts_penalty[0] != 1.0
        stop_ids = {int(i) for i in eos_token.view(-1).tolist()}
        new_tokens = torch.zeros(1, most, sp.vq, device=device, dtype=torch.long)
        sp.start(eos_token, temperature)
        positions = torch.arange(start, start + n, dtype=torch.long, device=device).unsqueeze(0)
        out = tts.model(
            position_ids=positions, past_key_values=a["past_key_values"], inputs_embeds=x,
            use_cache=True, output_attentions=False,
        )  # fmt: skip
        past = out.past_key_values
        token = sp.sample(out.last_hidden_state, sp.draw(penalty, False, no_stop or least > 0))
        t = 0
        for t in range(most):
            if t == 1 and self._block_fits(past, most, least, no_stop):
                draw, extent = sp.draw(penalty, penalize, True), carry.extent(1)
                new_tokens[0, 1:] = self.ops["tts.tokens"](
                    sp.prev, sp.position, sp.slot, sp.buffer, draw, extent, most - 1
                )  # no host read: nothing in the stretch can stop it
                carry.length += most - 1
                self.sampled["speech_blocks"] += 1
                t = most - 1  # the vendor's loop ends there: its last token is not returned
                break
            if t > 0:
                mask = no_stop or t < least
                if past is self.tts_view and carry.fits(1):
                    draw, extent = sp.draw(penalty, penalize, mask), carry.extent(1)
                    token = self.ops["tts.token"](
                        sp.prev, sp.position, sp.slot, sp.buffer, draw, extent
                    )
                    carry.length += 1
                else:  # the vendor's forward on its own cache (counted by _tts_forward)
                    self.fallbacks["tts_token_eager"] += 1
                    out = tts.model(
                        position_ids=torch.tensor([[start + n + t - 1]], device=device),
                        past_key_values=past, inputs_embeds=tts.emb_code[0](sp.prev),
                        use_cache=True, output_attentions=False,
                    )  # fmt: skip
                    past = out.past_key_values
                    token = sp.sample(out.last_hidden_state, sp.draw(penalty, penalize, mask))
                    sp.prev.copy_(token[:, :1])
            elif past is self.tts_view:
                sp.prev.copy_(token[:, :1])
                sp.place(start + n, carry.length)
            else:
                sp.prev.copy_(token[:, :1])
            ids = token.view(-1).tolist()  # the token's one host read
            self.sampled["speech_host_reads"] += 1
            new_tokens[:, t] = token
            if stop_ids.intersection(ids):
                break
        return new_tokens[:, 0:t, :], past

    def _block_fits(self, past: Any, most: int, least: int, no_stop: bool) -> bool:
        """Whether every token after the condition's can be one ``tts.tokens`` replay: the
        declared stretch, eos masked throughout (the vendor's loop cannot stop early), and one
        extent of the carry holding every slot it writes."""
        carry = self.tts_carry
        return (
            "tts.tokens" in self.ops and past is self.tts_view and carry is not None
            and most - 1 == self._tts_block and (no_stop or least >= most)
            and carry.fits(most - 1) and carry.extent(1) == carry.extent(most - 1)
        )  # fmt: skip

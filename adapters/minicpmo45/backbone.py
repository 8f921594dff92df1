"""MiniCPM-o 4.5's duplex object as the backbone of our period loop; its speech tokens to us.

The duplex object is the checkpoint's own code (``model.as_duplex(...)``), driven through its
published API only:

* ``prepare(prefix_system_prompt, suffix_system_prompt, ref_audio)`` starts a conversation;
* per 1-s unit, ``streaming_prefill(audio_waveform=16 kHz chunk)`` then ``streaming_generate()``
  → ``is_listen``, ``text``, ``end_of_turn`` (and ``finalize_unit()`` where the code defers the
  unit's end to it);
* ``set_break_event()`` / ``clear_break_event()`` for a barge-in, ``set_session_stop()`` before a
  new conversation;
* the model's ``reset_session()`` before every ``prepare``: ``prepare`` alone keeps the model's
  streaming session, in particular its audio encoder's cache (``model.audio_past_key_values``),
  so a conversation's audio embeddings would depend on the one before it. ``reset_session`` is
  what the model's own constructor runs, so every conversation starts from the state the first
  one had (the vendor's own streaming path calls it for a new session too).

**The hand-off.** Inside ``streaming_generate`` the duplex object turns the LLM's hidden states
into speech tokens with its TTS head and passes each unit's tokens to one method,
``_generate_waveform_from_tokens(new_tokens, prompt_wav_path, is_last_chunk, force_flush)``,
whose job is to run the vendor's Token2wav. We replace that method on the instance with
:meth:`DuplexBackbone._take`: it keeps the tokens and the two flags and returns no audio, so the
vendor's Token2wav is never built nor called (``prepare`` gets no ``prompt_wav_path``, the same
reason). The tokens, the turn's end and ``force_flush`` go to our windower
(:class:`~adapters.minicpmo45.windows.DuplexWindower`), whose calls run **our** Token2Wav stream
under the session's arm. Everything else (listen or speak, text, turn-taking, the TTS head's
sampling) is the vendor's code, untouched.

**Barge-in** (:meth:`DuplexBackbone.interrupt`, any thread): the next unit sets the vendor's
break event, so its ``streaming_prefill`` is skipped (the vendor drops that second of audio) and
``streaming_generate`` answers listen with ``end_of_turn``; we report ``turn_end`` and
``barge_in`` (our windower closes the turn with a last call), then clear the event. The vendor's
own TTS turn state is left as its code leaves it after a break.

The user's voice probability for the window's lamp comes from silero-vad on the same audio; it
decides nothing (the model listens for itself).

Threads: the engine thread, except :meth:`interrupt`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from adapters.face import FamilyError
from adapters.turns.vad import VoiceActivity
from engine.duplex import Phase, SpanFactory
from engine.windowed import BackboneStep

__all__ = ["DEFAULT_SYSTEM_PROMPT", "HANDOFF", "DuplexBackbone", "Handoff", "system_prompt"]

HANDOFF = "_generate_waveform_from_tokens"
"""The duplex object's method that gets each unit's speech tokens for its Token2wav."""

DEFAULT_SYSTEM_PROMPT = "Streaming Duplex Conversation! You are a helpful assistant."
"""The instruction the vendor's examples prepare a duplex conversation with."""


def system_prompt(text: str, with_audio: bool) -> tuple[str, str]:
    """``(prefix, suffix)`` around the reference audio, in the vendor's duplex template."""
    prefix = f"<|im_start|>system\n{text}\n<|audio_start|>"
    suffix = "<|audio_end|><|im_end|>" if with_audio else "<|im_end|>"
    if not with_audio:
        prefix = prefix.removesuffix("<|audio_start|>")
    return prefix, suffix


@dataclass(frozen=True)
class Handoff:
    """What the duplex object handed to its Token2wav in one unit."""

    tokens: Tensor  # (1, n) speech tokens, n >= 0
    last: bool  # ``is_last_chunk``: the turn ended in this unit
    flush: bool  # ``force_flush``: cut every window now (module docstring of windows.py)


class DuplexBackbone:
    """A ``engine.windowed.Backbone`` around the vendor's duplex object (module docstring).

    Args:
        duplex: what ``model.as_duplex(...)`` returned (or a stand-in with its API).
        period_s, input_rate: the unit (1 s at 16 kHz), from our declaration.
        device: where the speech tokens go (the decoder's device).
        prompt: the system instruction; ``ref_audio``: the voice recording at 16 kHz, or None.
        rules: the backbone rules installed on ``duplex`` (kept here for the bench and panel).
        vad: the user's voice activity for the window's lamp (the period's highest window
            probability), or None for 0.
    """

    def __init__(
        self,
        duplex: Any,
        *,
        period_s: float,
        input_rate: int,
        device: str,
        prompt: str = DEFAULT_SYSTEM_PROMPT,
        ref_audio: np.ndarray | None = None,
        vad: VoiceActivity | None = None,
        rules: Any = None,
    ) -> None:
        self.duplex, self.period_s, self.input_rate = duplex, period_s, input_rate
        self.rules = rules  # adapters.minicpmo45.rules.BackboneRules, or None (the vendor's own)
        self.device, self.prompt, self.ref_audio = torch.device(device), prompt, ref_audio
        self.vad = vad
        self._handoffs: list[Handoff] = []
        self._interrupt = threading.Event()
        self._speaking = False  # a turn is under way on the vendor's side
        self.flush = False  # the last unit's force_flush: read by the windower
        if not callable(getattr(duplex, HANDOFF, None)):
            raise FamilyError(
                f"the checkpoint's duplex code has no {HANDOFF}(), where this adapter takes its "
                "speech tokens: choose the MiniCPM-o-4_5 folder as released",
                "checkpoint",
            )
        setattr(duplex, HANDOFF, self._take)  # the hand-off: its speech tokens, not its audio
        self._prepare()

    def set_stage_timer(self, span: SpanFactory | None) -> None:
        """The backbone rules' stages (audio encoder, LLM prefill and decode, TTS head) as
        spans of the period, where the rules are installed."""
        if self.rules is not None:
            self.rules.set_stage_timer(span)

    def flushing(self) -> bool:
        """The vendor's ``force_flush`` of the unit just stepped (False when it handed nothing)."""
        return self.flush

    def interrupt(self) -> None:
        """Barge in at the next unit through the vendor's break event (any thread)."""
        self._interrupt.set()

    def reset(self) -> None:
        """A new conversation: the vendor's session stop, then ``prepare`` again."""
        self.duplex.set_session_stop()
        self._interrupt.clear()
        if self.vad is not None:
            self.vad.reset()
        self._prepare()

    def step(self, mic: np.ndarray) -> BackboneStep:
        """One unit: prefill the second of audio, generate, take the speech tokens."""
        broke = self._interrupt.is_set()
        if broke:
            self._interrupt.clear()
            self.duplex.set_break_event()
        self._handoffs.clear()
        self.duplex.streaming_prefill(audio_waveform=mic)
        result = self.duplex.streaming_generate()
        finalize = getattr(self.duplex, "finalize_unit", None)
        if callable(finalize) and not broke:
            finalize()  # the unified code defers feeding the unit's end to it
        if broke:
            self.duplex.clear_break_event()
        handoff = self._one_handoff()
        self.flush = handoff is not None and handoff.flush
        speaking = not bool(result.get("is_listen", True))
        spoke = self._speaking or handoff is not None
        turn_end = bool(result.get("end_of_turn", False)) and spoke
        self._speaking = spoke and not turn_end
        text = str(result.get("text") or "") if speaking else ""
        tokens = handoff.tokens if handoff is not None else self._no_tokens()
        return BackboneStep(
            phase=Phase.SPEAK if speaking or tokens.shape[1] else Phase.LISTEN,
            tokens=tokens,
            turn_end=turn_end,
            barge_in=broke and turn_end,
            voice_prob=float(self.vad.push(mic).max(initial=0.0)) if self.vad is not None else 0.0,
            text=text,
        )

    # -- internals ---------------------------------------------------------------------------

    def _take(
        self,
        new_tokens: Tensor,
        prompt_wav_path: str | None = None,
        is_last_chunk: bool = False,
        force_flush: bool = False,
    ) -> None:
        """Stands in for the vendor's ``_generate_waveform_from_tokens``: keep, return no audio."""
        tokens = new_tokens.detach().reshape(1, -1).to(device=self.device, dtype=torch.int32)
        self._handoffs.append(Handoff(tokens, bool(is_last_chunk), bool(force_flush)))
        return None

    def _one_handoff(self) -> Handoff | None:
        if len(self._handoffs) > 1:
            raise RuntimeError(
                f"the checkpoint's code handed speech tokens over {len(self._handoffs)} times in "
                "one unit; this adapter expects one hand-off per streaming_generate"
            )
        return self._handoffs[0] if self._handoffs else None

    def _no_tokens(self) -> Tensor:
        return torch.zeros(1, 0, dtype=torch.int32, device=self.device)

    def _prepare(self) -> None:
        """A conversation from the model's first state: its session reset, then ``prepare``."""
        reset_session = getattr(getattr(self.duplex, "model", None), "reset_session", None)
        if callable(reset_session):
            reset_session(reset_token2wav_cache=True)
        prefix, suffix = system_prompt(self.prompt, self.ref_audio is not None)
        self.duplex.prepare(
            prefix_system_prompt=prefix, suffix_system_prompt=suffix, ref_audio=self.ref_audio
        )
        self._speaking, self.flush = False, False

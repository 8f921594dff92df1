"""A stand-in for MiniCPM-o 4.5's duplex object: its published API, scripted (the one fake).

It sits exactly at the model's boundary (what ``model.as_duplex(...)`` returns in the
checkpoint's code), so everything of ours around it runs as in a real session: the backbone, the
hand-off, the windower, our Token2Wav, the loop. Its control flow follows the public code
(OpenBMB/MiniCPM-o-Demo ``MiniCPMO45/modeling_minicpmo.py``, ``MiniCPMODuplex``):

* ``prepare`` clears the break and stop events and starts a conversation (turn state reset); it
  keeps the model's streaming session (:class:`StandInSession`: the audio encoder's cache that
  each prefill grows), which only the model's ``reset_session`` drops;
* ``streaming_prefill`` does nothing while the break or stop event is set (``success`` False);
* ``streaming_generate`` answers listen + ``end_of_turn`` while either event is set; else plays
  the next unit of its script: listen, or speak ``n`` speech tokens (seeded random below the
  flow's vocabulary) handed to ``_generate_waveform_from_tokens(tokens, prompt_wav_path,
  end_of_turn, force_flush)`` with ``force_flush`` at a turn's first unit (public code) or at
  every unit (``flush_every_unit``, the unified code).

Its own ``_generate_waveform_from_tokens`` is the vendor's windowing restated from that code
(silence prefix ``[4218] * 3``, flushing and window loops, the last call, the reset), recording
the calls its Token2wav would get instead of running one: :attr:`vendor_calls` is what the
vendor would have synthesized, to compare our windower with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

SILENCE = 4218
LOOKAHEAD = 3
CHUNK = 25


@dataclass(frozen=True)
class Unit:
    """One unit of the script: listen (``tokens`` None) or speak ``tokens`` speech tokens."""

    tokens: int | None = None
    end_of_turn: bool = False
    text: str = ""


LISTEN = Unit()


def speak(tokens: int, text: str = "", end: bool = False) -> Unit:
    return Unit(tokens, end, text or f"w{tokens}")


@dataclass
class StandInSession:
    """The model's streaming session as the duplex object reaches it (``duplex.model``): the
    audio encoder's cache (``audio_past_key_values``, here the samples each prefill heard),
    dropped by ``reset_session`` only, as in the public code."""

    audio_past_key_values: list[int] | None = None
    resets: int = 0

    def reset_session(self, reset_token2wav_cache: bool = True) -> None:
        self.audio_past_key_values = None
        self.resets += 1


@dataclass
class StandInDuplex:
    """The duplex object's published API over a script of units (module docstring)."""

    script: list[Unit]
    seed: int = 0
    flush_every_unit: bool = False
    vocab: int = 6561
    events: list[tuple[str, Any]] = field(default_factory=list)
    vendor_calls: list[tuple[list[int], bool]] = field(default_factory=list)  # (window, last)
    vendor_resets: int = 0
    heard: list[int] = field(default_factory=list)  # samples prefilled per unit
    model: StandInSession = field(default_factory=StandInSession)

    def __post_init__(self) -> None:
        self._generator = torch.Generator().manual_seed(self.seed)
        self._unit = 0
        self._break = self._stop = False
        self._turn_start = True
        self._buffer = [SILENCE] * LOOKAHEAD

    # -- the published API ---------------------------------------------------------------------

    def prepare(
        self,
        prefix_system_prompt: str | None = None,
        suffix_system_prompt: str | None = None,
        ref_audio: np.ndarray | None = None,
        prompt_wav_path: str | None = None,
    ) -> str:
        self.events.append(("prepare", (prefix_system_prompt, suffix_system_prompt, ref_audio)))
        self._break = self._stop = False
        self._turn_start = True
        self._buffer = [SILENCE] * LOOKAHEAD
        return (prefix_system_prompt or "") + (suffix_system_prompt or "")

    def streaming_prefill(self, audio_waveform: np.ndarray | None = None) -> dict[str, Any]:
        if self._break or self._stop:
            return {"success": False}
        assert audio_waveform is not None and audio_waveform.dtype == np.float32
        self.heard.append(int(audio_waveform.shape[0]))
        cache = self.model.audio_past_key_values or []
        self.model.audio_past_key_values = [*cache, int(audio_waveform.shape[0])]
        return {"success": True}

    def streaming_generate(self) -> dict[str, Any]:
        if self._break or self._stop:
            return {"is_listen": True, "text": "", "audio_waveform": None, "end_of_turn": True}
        unit = self.script[self._unit % len(self.script)]
        self._unit += 1
        if unit.tokens is None:
            return {"is_listen": True, "text": "", "audio_waveform": None, "end_of_turn": False}
        tokens = torch.randint(0, self.vocab, (1, unit.tokens, 1), generator=self._generator)
        flush = self._turn_start or self.flush_every_unit
        audio = self._generate_waveform_from_tokens(tokens, None, unit.end_of_turn, flush)
        self._turn_start = unit.end_of_turn
        if unit.end_of_turn:
            self._buffer = [SILENCE] * LOOKAHEAD
            self.vendor_resets += 1
        return {
            "is_listen": False,
            "text": unit.text,
            "audio_waveform": audio,
            "end_of_turn": unit.end_of_turn,
        }

    def set_break_event(self) -> None:
        self.events.append(("set_break_event", None))
        self._break = True

    def clear_break_event(self) -> None:
        self.events.append(("clear_break_event", None))
        self._break = False

    def set_session_stop(self) -> None:
        self.events.append(("set_session_stop", None))
        self._stop = self._break = True

    # -- the vendor's Token2wav hand-off, restated (replaced on the instance by ours) ----------

    def _generate_waveform_from_tokens(
        self,
        new_tokens: torch.Tensor,
        prompt_wav_path: str | None,
        is_last_chunk: bool = False,
        force_flush: bool = False,
    ) -> None:
        self._buffer += new_tokens.reshape(-1).tolist()
        if force_flush:
            while len(self._buffer) >= LOOKAHEAD + 5:
                n = min(CHUNK + LOOKAHEAD, len(self._buffer))
                self.vendor_calls.append((self._buffer[:n], False))
                self._buffer = self._buffer[min(CHUNK, n - LOOKAHEAD) :]
        else:
            while len(self._buffer) >= CHUNK + LOOKAHEAD:
                self.vendor_calls.append((self._buffer[: CHUNK + LOOKAHEAD], False))
                self._buffer = self._buffer[CHUNK:]
        if is_last_chunk and self._buffer:
            self.vendor_calls.append((self._buffer, True))
            self._buffer = []
        return None


class StandInModel:
    """What ``AutoModel.from_pretrained`` returns for the folder: ``as_duplex`` calls
    ``init_tts()`` first, as the released code does, then hands out a :class:`StandInDuplex`."""

    def __init__(self, script: list[Unit], **kwargs: Any) -> None:
        self.script, self.loaded_with = script, kwargs
        self.init_tts_calls = 0
        self.devices: list[str] = []
        self.duplex_kwargs: dict[str, Any] = {}

    def to(self, device: str) -> StandInModel:
        self.devices.append(device)
        return self

    def eval(self) -> StandInModel:
        return self

    def init_tts(self, *args: Any, **kwargs: Any) -> None:
        self.init_tts_calls += 1  # the vendor's Token2wav would be built here

    def as_duplex(self, **kwargs: Any) -> StandInDuplex:
        self.init_tts()
        self.duplex_kwargs = kwargs
        return StandInDuplex(self.script)


# -- the vendor's StreamDecoder around a transformers Qwen3 (the LLM), restated ------------------


class StandInWindow:
    """The vendor's ``DuplexWindowConfig`` fields the rules read (basic mode)."""

    def __init__(self, high: int, low: int) -> None:
        self.sliding_window_mode = "basic"
        self.basic_window_high_tokens, self.basic_window_low_tokens = high, low


class StandInDecoder:
    """``StreamDecoder``'s cache-facing methods (OpenBMB/MiniCPM-o-Demo ``MiniCPMO45/utils.py``),
    restated over a transformers ``Qwen3ForCausalLM``: ``feed`` runs one forward on a growing
    cache (legacy tuple form) and returns ``(logits of the last row, last hidden state)``;
    ``_drop_tokens_from_cache`` drops ``[preserve, preserve + length)`` and re-rotates the kept
    suffix's keys to their new positions, as the vendor's ``drop_tokens_from_cache`` does."""

    def __init__(self, llm: Any, high: int, low: int, preserve: int) -> None:
        self.m = llm
        self.cache: Any = None
        self._window_config = StandInWindow(high, low)
        self._system_preserve_length = preserve
        # The vendor's special ids, the top of the tiny vocabulary here (its tokenizer's there).
        vocab = int(llm.config.vocab_size)
        self.chunk_eos_id, self.turn_eos_id, self.listen_id = vocab - 1, vocab - 2, vocab - 3
        self.special_token_ids = [vocab - 6, vocab - 5, vocab - 4, vocab - 3]
        self.forbidden_token_ids = [vocab - 5, self.chunk_eos_id]  # the vendor appends chunk-eos
        self.generated_tokens: list[int] = []
        self.generated_special_tokens: list[int] = []

    def reset(self) -> None:
        self.cache = None
        self.generated_tokens, self.generated_special_tokens = [], []

    def embed_token(self, tid: Any) -> torch.Tensor:
        if isinstance(tid, int):
            tid = torch.tensor([tid], device=self.m.device)
        out: torch.Tensor = self.m.model.embed_tokens(tid)
        return out

    @torch.no_grad()
    def decode(
        self,
        logits: torch.Tensor,
        mode: str = "sampling",
        temperature: float = 0.7,
        top_k: int = 20,
        top_p: float = 0.8,
        listen_top_k: int | None = None,
        listen_prob_scale: float = 1.0,
        text_repetition_penalty: float = 1.05,
        text_repetition_window_size: int = 512,
        length_penalty: float = 1.1,
    ) -> torch.Tensor:
        """``StreamDecoder.decode`` restated (its host form: ``.item()`` reads, a Python loop of
        per-id divisions, boolean indexing); ``listen_top_k`` is not restated."""
        assert listen_top_k is None
        logits = logits.clone()
        if mode == "greedy":
            first = int(torch.argmax(logits[0]).item())
        else:
            first = int(torch.multinomial(F.softmax(logits[0], dim=-1), num_samples=1).item())
        if first == self.chunk_eos_id:
            return torch.tensor([first], device=logits.device)
        logits[:, self.forbidden_token_ids] = float("-inf")
        if text_repetition_penalty != 1.0 and self.generated_tokens:
            for tid in set(self.generated_tokens[-text_repetition_window_size:]):
                if tid < logits.size(-1):
                    if text_repetition_penalty > 1.0:
                        logits[0, tid] /= text_repetition_penalty
                    else:
                        logits[0, tid] *= 1.0 / text_repetition_penalty
        if length_penalty != 1.0:
            t = self.turn_eos_id
            if logits[0, t] > 0:
                logits[0, t] = logits[0, t] / length_penalty
            else:
                logits[0, t] = logits[0, t] * length_penalty
        if listen_prob_scale != 1.0:
            logits[0, self.listen_id] *= listen_prob_scale
        if mode == "greedy":
            token = torch.argmax(logits, dim=-1)
        else:
            logits = logits / temperature
            if top_k > 0:
                kth = torch.topk(logits, min(top_k, logits.size(-1)))[0][..., -1, None]
                logits[logits < kth] = float("-inf")
            if top_p > 0.0:
                ordered, order = torch.sort(logits, descending=True)
                drop = torch.cumsum(F.softmax(ordered, dim=-1), dim=-1) > top_p
                drop[..., 1:] = drop[..., :-1].clone()
                drop[..., 0] = 0
                logits[0, order[drop]] = float("-inf")
            token = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1).squeeze(1)
        if token.item() not in self.special_token_ids:
            self.generated_tokens.append(int(token.item()))
        else:
            self.generated_special_tokens.append(int(token.item()))
        return token

    def get_cache_length(self) -> int:
        return 0 if self.cache is None else int(self.cache[0][0].shape[2])

    def feed(self, embeds: torch.Tensor, return_logits: bool = False) -> Any:
        from transformers import DynamicCache

        n = embeds.size(0)
        past = self.get_cache_length()
        cache = DynamicCache()
        if self.cache is not None:
            for i, (k, v) in enumerate(self.cache):
                cache.update(k, v, i)
        positions = torch.arange(past, past + n, device=embeds.device).unsqueeze(0)
        with torch.no_grad():
            out = self.m(
                inputs_embeds=embeds.unsqueeze(0), position_ids=positions, past_key_values=cache,
                output_hidden_states=True, use_cache=True,
            )  # fmt: skip
        self.cache = tuple((layer.keys, layer.values) for layer in out.past_key_values.layers)
        if return_logits:
            return self.m.lm_head(out.hidden_states[-1])[:, -1], out.hidden_states[-1]
        return None

    def _drop_tokens_from_cache(self, length: int) -> bool:
        total = self.get_cache_length()
        keep = self._system_preserve_length
        if self.cache is None or length <= 0 or total - keep < length:
            return False
        old = torch.arange(keep + length, total)
        new = torch.arange(keep, total - length)
        theta = float(self.m.config.rope_parameters["rope_theta"])
        pairs = []
        for k, v in self.cache:
            suffix = _rerotate(k[:, :, keep + length :], old, new, theta)
            pairs.append(
                (
                    torch.cat([k[:, :, :keep], suffix], 2),
                    torch.cat([v[:, :, :keep], v[:, :, keep + length :]], 2),
                )
            )
        self.cache = tuple(pairs)
        return True


def _rerotate(
    keys: torch.Tensor, old: torch.Tensor, new: torch.Tensor, theta: float
) -> torch.Tensor:
    """Keys rotated at ``old`` positions, rotated to ``new`` (its realign_rotary_suffix)."""
    d = keys.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))

    def cos_sin(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.einsum("i,j->ij", p.float(), inv)
        return (torch.cat([a.cos(), a.cos()], -1).to(keys.dtype),
                torch.cat([a.sin(), a.sin()], -1).to(keys.dtype))  # fmt: skip

    def half(x: torch.Tensor) -> torch.Tensor:
        return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), -1)

    c, s = cos_sin(old)
    base = c * keys - s * half(keys)
    c, s = cos_sin(new)
    return c * base + s * half(base)


class StandInTTS:
    """The TTS head's parts the rules touch: ``model`` (a transformers ``LlamaModel``), its
    ``config`` and ``generate_chunk`` (the vendor calls ``model`` once per speech token)."""

    def __init__(self, core: Any) -> None:
        self.model, self.config = core, core.config

    def generate_chunk(
        self, inputs_embeds: torch.Tensor, steps: int, start: int = 0
    ) -> list[torch.Tensor]:
        """The vendor's call pattern: the condition, then one token a step (its positions)."""
        outs, past, n = [], None, inputs_embeds.shape[1]
        with torch.inference_mode():
            for t in range(steps):
                x = inputs_embeds if t == 0 else outs[-1][:, -1:]
                pos = (
                    torch.arange(start, start + n)[None]
                    if t == 0
                    else torch.tensor([[start + n + t - 1]])
                )
                out = self.model(
                    position_ids=pos, past_key_values=past, inputs_embeds=x, use_cache=True
                )
                past = out.past_key_values
                outs.append(out.last_hidden_state.clone())
        return outs


class StandInBackboneDuplex:
    """The duplex object's parts the backbone rules reach: ``decoder``, ``model.tts``, the
    decode budget and the two unit methods (here only markers the rules time)."""

    def __init__(self, decoder: StandInDecoder, tts: Any, budget: int = 20) -> None:
        self.decoder, self.max_new_speak_tokens_per_chunk = decoder, budget
        self.tts_repetition_penalty = 1.05
        self.model = type("Model", (), {})()
        self.model.tts = tts

    def streaming_prefill(self, audio_waveform: Any = None) -> dict[str, Any]:
        return {"success": True}

    def streaming_generate(self) -> dict[str, Any]:
        return {"is_listen": True}


class CustomRepetitionPenaltyLogitsProcessorRepeat:
    """The vendor's TTS repetition processor (same name: the rules recognize it by name),
    restated: counts of the last ``past_window`` ids, ``penalty ** count`` multiplied into
    negative scores and divided out of the others."""

    def __init__(self, penalty: float, max_input_ids: int, past_window: int) -> None:
        self.penalty, self.max_input_ids, self.past_window = penalty, max_input_ids, past_window

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.size(1) > self.past_window:
            input_ids = input_ids.narrow(1, -self.past_window, self.past_window)
        freq = F.one_hot(input_ids, scores.size(1)).sum(1)
        alpha = torch.pow(self.penalty, freq)
        scores = scores.contiguous()
        return torch.where(scores < 0, scores.multiply(alpha), scores.divide(alpha))


def gen_logits(num_code: int, repetition_penalty: float = 1.0) -> tuple[list[Any], list[Any]]:
    """The vendor's ``gen_logits`` as far as the TTS head uses it (its processors)."""
    if repetition_penalty == 1:
        return [], []
    return [], [CustomRepetitionPenaltyLogitsProcessorRepeat(repetition_penalty, num_code, 16)]


class StandInSpeechHead:
    """The vendor's ``MiniCPMTTS`` as ``generate_chunk`` uses it: a transformers ``LlamaModel``
    (``model``), ``emb_code`` and weight-normed ``head_code`` (one codebook), restated."""

    def __init__(self, core: Any, codes: int) -> None:
        from torch import nn
        from torch.nn.utils.parametrizations import weight_norm

        self.model, self.config = core, core.config
        self.config.num_audio_tokens = codes
        self.num_vq, self.num_audio_tokens, self.device = 1, codes, torch.device("cpu")
        hidden = int(core.config.hidden_size)
        self.emb_code = nn.ModuleList([nn.Embedding(codes, hidden)])
        self.head_code = nn.ModuleList([weight_norm(nn.Linear(hidden, codes, bias=False))])

    @torch.inference_mode()
    def generate_chunk(
        self,
        inputs_embeds: torch.Tensor,
        temperature: torch.Tensor,
        repetition_penalty: float,
        eos_token: torch.Tensor,
        force_no_stop: bool = False,
        max_new_token: int = 500,
        min_new_tokens: int = 0,
        past_key_values: Any = None,
        logits_processors: Any = None,
        text_start_pos: int = 0,
    ) -> tuple[torch.Tensor, Any]:
        """The vendor's loop: host positions, ``finish`` read every token."""
        import torch.nn.utils.parametrize as P

        _, processors = gen_logits(self.num_audio_tokens, repetition_penalty)
        finish = torch.zeros(1).bool()
        temperature = temperature.unsqueeze(0).expand(1, -1).contiguous().view(-1, 1)
        n = inputs_embeds.shape[1]
        new_tokens = torch.zeros(1, max_new_token, self.num_vq, dtype=torch.long)
        t = 0
        for t in range(max_new_token):
            if t == 0:
                x = inputs_embeds
                pos = torch.tensor(list(range(text_start_pos, text_start_pos + n))).unsqueeze(0)
            else:
                x = self.emb_code[0](new_tokens[:, t - 1 : t, 0])
                pos = torch.tensor([text_start_pos + n + t - 1]).unsqueeze(0)
            out = self.model(
                position_ids=pos, past_key_values=past_key_values, inputs_embeds=x,
                use_cache=True, output_attentions=False,
            )  # fmt: skip
            past_key_values = out.past_key_values
            with P.cached():
                logits = torch.empty(1, x.shape[1], self.num_audio_tokens, 1, dtype=torch.float)
                logits[..., 0] = self.head_code[0](out.last_hidden_state)
            logits = logits[:, -1].float().permute(0, 2, 1).reshape(-1, self.num_audio_tokens)
            logits /= temperature
            if t > 0:
                previous = new_tokens[:, 0:t].permute(0, 2, 1).reshape(1, -1)
                for processor in processors:
                    logits = processor(previous, logits)
            if force_no_stop or t < min_new_tokens:
                logits[:, eos_token] = -torch.inf
            idx = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1).view(-1, 1)
            finish.logical_or_(idx.eq(eos_token).any(1))
            new_tokens[:, t] = idx
            if t == 0 and finish.any():
                break
            if finish.all():
                break
        return new_tokens[:, 0:t, :], past_key_values

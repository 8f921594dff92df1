"""The two rules on MiniCPM-o 4.5's backbone: its LLM and TTS head over carries, replayed.

:class:`BackboneRules` installs, on the vendor's duplex object (instance attributes only; the
vendor's classes are untouched):

* ``duplex.decoder.feed`` — the vendor's ``StreamDecoder.feed`` runs one transformers forward
  with a growing ``DynamicCache`` per call. Ours runs :class:`~.llm_step.CarryStep` over the
  LLM's :class:`~.kv.KVCarry` (one address for the conversation) and returns what the vendor's
  returns (``(logits [1, vocab], hidden [1, L, hidden])`` when asked). The vendor's sampling,
  listen/speak logic and unit bookkeeping around it run unchanged;
* ``duplex.decoder._drop_tokens_from_cache`` — the window's upkeep: when the vendor's basic
  sliding window moves, its own code drops units and re-rotates the kept keys on a cache handed
  to it in its own form; the result is copied back into the carry (eager, counted);
* ``duplex.model.tts.model.forward`` — the TTS head's Llama, called by the vendor's
  ``generate_chunk`` once per speech token: the same step over the TTS carry;
* ``duplex.model.apm.forward`` — the audio encoder's streaming forward, once a unit: the same
  over its own carry (:mod:`~adapters.minicpmo45.audio_rules`);
* ``duplex.decoder.decode`` / ``embed_token`` and ``duplex.model.tts.generate_chunk`` — the
  per-token host loops, on the device under a replaying arm (operators ``llm.sample`` and
  ``tts.token``, :mod:`~adapters.minicpmo45.sampling_rules`): one host read a token;
* timing wrappers on ``streaming_prefill``, ``streaming_generate``, the audio encoder and the
  TTS head's ``generate_chunk``, for the per-unit stage split.

Every step goes through the session's :class:`~engine.replay.ReplayEngine` (operators
``llm.step``, ``llm.feed``, ``tts.step``, ``llm.sample``, ``tts.token``, ``audio.step``) when
the session's
arm replays, else runs the same function eagerly: the family's eager arm is this code with the
same shapes (its sampling is the vendor's). The catalog (the declaration's feed lengths, the
TTS condition's every length from 1 to the unit's decode budget, the vendor's sampling
defaults) is known before traffic; any other length is a counted miss (``not_in_catalog``).
Where the rules cannot run a call (the carry is full, the vendor's context window mode, a cache
the vendor built), the vendor's own code runs it and the reason is counted in :meth:`stats`
``fallbacks``.

:meth:`use_vendor` switches the whole backbone back to the vendor's code (the peer the bench
compares with); switch between conversations only.
"""

from __future__ import annotations

import inspect
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from adapters.minicpmo45.audio_rules import AudioRules, AudioUnit
from adapters.minicpmo45.fused_step import DECODES, KERNELS
from adapters.minicpmo45.kv import CarryView, KVCarry, attribute, cache_pairs, round_up
from adapters.minicpmo45.llm_step import CarryStep
from adapters.minicpmo45.sample import DeviceDecode
from adapters.minicpmo45.sampling_rules import Ahead, SamplingRules
from adapters.minicpmo45.tts_sample import SpeechTokens
from engine.arms import Arm
from engine.duplex import SpanFactory, untimed
from engine.replay import ReplayEngine, ReplayOp
from engine.safe_yaml import read_yaml
from engine.signature import Catalog, TensorSpec

__all__ = [
    "DECLARATION",
    "DECODE_ENV",
    "KERNELS_ENV",
    "STAGES",
    "WINDOW_ENV",
    "BackboneRules",
    "BackboneSpec",
    "attribute",
    "decode_budget",
]

DECLARATION = Path(__file__).resolve().parent / "backbone.yaml"
WINDOW_ENV = "DUPLEXCADENCE_MO45_WINDOW"
"""``high,low``: the vendor's basic window marks for a run that must see a slide early."""
KERNELS_ENV = "DUPLEXCADENCE_MO45_KERNELS"
"""``vendor`` or ``fused``: the step's kernels for a run, over the declaration's."""
DECODE_ENV = "DUPLEXCADENCE_MO45_DECODE"
"""``sdpa`` or ``flex``: a one-token step's attention for a run, over the declaration's."""
EXTENT_ENV = "DUPLEXCADENCE_MO45_EXTENT_STEP"
"""Slots: the carries' extent ladder for a run, over the declaration's ``extent_step``; 0 attends
each carry's whole capacity (one signature per fed length: up to 8x fewer graphs at the
released shapes, every multi-token feed attending 4,096 slots)."""

STAGES = ("audio_encoder", "llm_prefill", "llm_decode", "tts_head")


@dataclass(frozen=True)
class BackboneSpec:
    """The backbone's declaration (``adapters/minicpmo45/backbone.yaml``, beside the family: it
    is not an engine declaration, so ``assets/declarations`` does not list it)."""

    window_mode: str
    llm_capacity_from: str
    unit_tokens_from: str
    unit_extra_tokens: int
    llm_lengths: tuple[int, ...]
    tts_capacity_from: str
    tts_lengths: tuple[int, ...]
    condition_tokens_from: str
    tts_block_tokens: int
    audio_capacity_from: str
    audio_units: tuple[AudioUnit, ...]
    round_to: int
    extent_step: int
    sdpa: dict[str, str]
    kernels: dict[str, str]  # by device type, as ``sdpa``: ``vendor`` or ``fused``
    decode: dict[str, str]  # by device type: ``sdpa`` or ``flex`` (a one-token step's attention)

    @classmethod
    def read(cls, path: Path = DECLARATION) -> BackboneSpec:
        data = read_yaml(path)
        llm, tts, audio = data["llm"], data["tts"], data["audio"]
        return cls(
            window_mode=str(llm["window_mode"]),
            llm_capacity_from=str(llm["capacity_from"]),
            unit_tokens_from=str(llm["unit_tokens_from"]),
            unit_extra_tokens=int(llm["unit_extra_tokens"]),
            llm_lengths=tuple(int(n) for n in llm["feed_lengths"]),
            tts_capacity_from=str(tts["capacity_from"]),
            tts_lengths=tuple(int(n) for n in tts["feed_lengths"]),
            condition_tokens_from=str(tts["condition_tokens_from"]),
            tts_block_tokens=int(tts["block_tokens"]),
            audio_capacity_from=str(audio["capacity_from"]),
            audio_units=tuple(
                (int(u["mel_frames"]), int(u["prefix"]), int(u["suffix"])) for u in audio["units"]
            ),
            round_to=int(data["round_to"]),
            extent_step=int(data["extent_step"]),
            sdpa={str(k): str(v) for k, v in data["sdpa"].items()},
            kernels={
                str(k): _known("kernels", str(v), KERNELS) for k, v in data["kernels"].items()
            },
            decode={
                str(k): _known("decode_attention", str(v), DECODES)
                for k, v in data["decode_attention"].items()
            },
        )

    def duplex_kwargs(self) -> dict[str, Any]:
        """What ``as_duplex`` is asked for: the window mode, and the marks when overridden."""
        kwargs: dict[str, Any] = {"sliding_window_mode": self.window_mode}
        marks = os.environ.get(WINDOW_ENV, "").strip()
        if marks:
            try:
                high, low = (int(part) for part in marks.split(","))
            except ValueError:
                raise ValueError(
                    f"{WINDOW_ENV}={marks!r}: expected 'high,low' token counts, e.g. 600,500"
                ) from None
            kwargs |= {"basic_window_high_tokens": high, "basic_window_low_tokens": low}
        return kwargs


def _known(key: str, name: str, choices: tuple[str, ...]) -> str:
    """``name`` if it is one of ``choices`` for the declaration's ``key``, else refused."""
    if name not in choices:
        raise ValueError(f"backbone {key} {name!r}: expected one of {', '.join(choices)}")
    return name


def _on_device(
    key: str, declared: dict[str, str], env: str, choices: tuple[str, ...], device: torch.device
) -> str:
    """The declaration's ``key`` on ``device``: ``env`` where set, else what ``declared`` says for
    the device's type (the step's kernels, a one-token step's attention)."""
    return _known(key, os.environ.get(env, "").strip() or declared[device.type], choices)


def _extent_step(declared: int) -> int:
    """The declaration's ``extent_step``, or :data:`EXTENT_ENV`'s where set (0: no ladder)."""
    text = os.environ.get(EXTENT_ENV, "").strip()
    if not text:
        return declared
    if not text.isdigit():
        raise ValueError(
            f"{EXTENT_ENV}={text!r}: expected a whole number of slots (0: each carry's whole "
            "capacity), or unset it for the declaration's extent_step"
        )
    return int(text)


def _usable_backend(name: str, device: torch.device, dtype: torch.dtype) -> tuple[str, str]:
    """The declared SDPA backend if it runs a masked, grouped-row call like the step's on this
    device, else ``math`` and why the declared one was refused (recorded in :meth:`stats`)."""
    from adapters.minicpmo45.llm_step import sdpa_backend

    q = torch.zeros(1, 2, 4, 64, dtype=dtype, device=device)
    kv = torch.zeros(1, 2, 128, 64, dtype=dtype, device=device)
    mask = torch.ones(1, 1, 4, 128, dtype=torch.bool, device=device)
    try:
        with sdpa_backend(name):
            torch.nn.functional.scaled_dot_product_attention(q, kv, kv, attn_mask=mask)
    except RuntimeError as error:
        return (
            "math",
            f"{name}: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
        )
    return name, ""


def _compile_stats() -> dict[str, Any]:
    """The fused pieces' compiles so far (process-wide: the pieces are shared)."""
    from adapters.minicpmo45.fused_step import compiled

    return {
        name: {"enabled": p.enabled, "compiles": p.compiles, "seconds": round(p.compile_s, 2)}
        for name, p in compiled().items()
    }


def decode_budget(duplex: Any, name: str) -> int:
    """The most tokens a unit decodes: the duplex object's attribute ``name`` or, when larger,
    the default of ``streaming_generate``'s parameter of that name (what a call without it,
    as the family's, uses)."""
    budget = int(getattr(duplex, name))
    generate = getattr(duplex, "streaming_generate", None)
    if callable(generate):
        param = inspect.signature(generate).parameters.get(name)
        if param is not None and isinstance(param.default, int):
            budget = max(budget, param.default)
    return budget


class BackboneRules(SamplingRules, AudioRules):
    """The rules installed on one duplex object (module docstring).

    Args:
        duplex: what ``model.as_duplex(...)`` returned (its ``decoder``, ``model``).
        replay: the session's replay engine (Token2Wav's: one engine, one panel).
        arm: the session's current arm (read at every call: arms switch live).
        spec: the backbone declaration.
    """

    def __init__(
        self, duplex: Any, replay: ReplayEngine, arm: Callable[[], Arm], spec: BackboneSpec
    ) -> None:
        self.duplex, self.replay, self.arm, self.spec = duplex, replay, arm, spec
        self.decoder = duplex.decoder
        llm = self.decoder.m
        device = next(llm.parameters()).device
        self.device = device
        dtype = next(llm.parameters()).dtype
        self.kernels = _on_device("kernels", spec.kernels, KERNELS_ENV, KERNELS, device)
        self.decode = _on_device("decode_attention", spec.decode, DECODE_ENV, DECODES, device)
        self.extent_step = _extent_step(spec.extent_step)
        self.backend, self.backend_refused = _usable_backend(
            spec.sdpa["cuda" if device.type == "cuda" else "cpu"], device, dtype
        )
        unit = int(attribute(duplex, spec.unit_tokens_from)) + max(spec.llm_lengths)
        unit += spec.unit_extra_tokens
        high = int(attribute(duplex, spec.llm_capacity_from))
        self.llm_step = CarryStep(
            llm.model, round_up(high + unit, spec.round_to), self.backend, head=llm.lm_head,
            kernels=self.kernels, decode=self.decode, block=spec.round_to,
        )  # fmt: skip
        self.llm_carry = self._carry(self.llm_step, dtype)
        self.llm_view = CarryView(self.llm_carry)
        hidden = int(llm.config.hidden_size)
        extra = lambda: f"{self.backend}/{self.kernels}/{self.decode}"  # noqa: E731
        catalog = self._catalog(self.llm_carry, hidden, dtype, spec.llm_lengths)
        self.ops: dict[str, ReplayOp] = {
            "llm.step": replay.register(
                "llm.step", self.llm_step.logits, aliased=["buffer"], extra_key=extra,
                catalog=catalog,
            ),
            "llm.feed": replay.register(
                "llm.feed", self.llm_step.hidden, aliased=["buffer"], extra_key=extra,
                catalog=catalog,
            ),
        }  # fmt: skip
        self.sampler: DeviceDecode | None = None
        self._last: tuple[int, Tensor] | None = None  # the last sampled id, on the host and device
        self._ahead: Ahead | None = None  # a decode step launched before its id was read
        if callable(getattr(self.decoder, "decode", None)):
            self._sampler(llm, dtype)
        self.tts_step: CarryStep | None = None
        self.tts_carry: KVCarry | None = None
        self.speech: SpeechTokens | None = None
        tts = getattr(getattr(duplex, "model", None), "tts", None)
        condition = decode_budget(duplex, spec.condition_tokens_from)
        self.tts_lengths = tuple(sorted(set(spec.tts_lengths) | set(range(1, condition + 1))))
        if tts is not None and getattr(tts, "model", None) is not None:
            core = tts.model
            tdtype = next(core.parameters()).dtype
            capacity = round_up(int(attribute(duplex.model, spec.tts_capacity_from)), spec.round_to)
            self.tts_step = CarryStep(
                core, capacity, self.backend, kernels=self.kernels, decode=self.decode,
                block=spec.round_to,
            )  # fmt: skip
            self.tts_carry = self._carry(self.tts_step, tdtype)
            self.tts_view = CarryView(self.tts_carry)
            self.ops["tts.step"] = replay.register(
                "tts.step", self.tts_step.hidden, aliased=["buffer"], extra_key=extra,
                catalog=self._catalog(self.tts_carry, int(core.config.hidden_size), tdtype,
                                      self.tts_lengths),
            )  # fmt: skip
            self._tts_block = spec.tts_block_tokens
            if all(hasattr(tts, a) for a in ("emb_code", "head_code", "num_vq")):
                self._speech_tokens(tts, tdtype)
        self.fallbacks: Counter[str] = Counter()
        self._audio(spec.audio_capacity_from, spec.round_to, self.extent_step, spec.audio_units)
        self.vendor = False
        self.warmed = False  # every catalog entry captured (warmup.py): once for every arm
        self.timing = False
        self.sampled = dict.fromkeys(("tokens", "host_reads", "rewinds", "ring_rebuilt"), 0)
        self.sampled["speech_host_reads"] = self.sampled["speech_blocks"] = 0
        self.sampled["ahead_used"] = self.sampled["ahead_dropped"] = 0
        self.window = {"slides": 0, "tokens_dropped": 0}
        self.per_unit: list[dict[str, Any]] = []
        self._unit: dict[str, Any] = {}
        self._stage: str | None = None
        self._span: SpanFactory = untimed
        self._originals: dict[tuple[int, str], Any] = {}
        self._install()

    # -- public -----------------------------------------------------------------------------

    def use_vendor(self, vendor: bool) -> None:
        """Run the vendor's own backbone code (True) or ours (False) from the next call."""
        if vendor == self.vendor:
            return
        self._ahead = None
        if vendor:
            self._export_llm()
            self._export_audio()
            self._uninstall_steps()
        else:
            self._install_steps()
        self.vendor = vendor

    def set_stage_timer(self, span: SpanFactory | None) -> None:
        """Each stage (:data:`STAGES`) also as ``span(stage)`` (the loop's ``Metrics.span``:
        the trace and the panel), or no spans with None."""
        self._span = span or untimed

    def reset_stats(self) -> None:
        self.fallbacks.clear()
        self.sampled = dict.fromkeys(self.sampled, 0)
        self.window = {"slides": 0, "tokens_dropped": 0}
        self.per_unit.clear()
        for name in self.ops:
            self.ops[name].counters = type(self.ops[name].counters)()

    def stats(self) -> dict[str, Any]:
        """Plain JSON: per-unit stages, replay counters of our operators, fallbacks, carries."""
        stages = {s: {"seconds": [u.get(s, 0.0) for u in self.per_unit]} for s in STAGES}
        carry = {
            "llm_capacity": self.llm_carry.capacity,
            "llm_length": self.llm_carry.length,
            "llm_bytes": self.llm_carry.nbytes,
        }
        if self.tts_carry is not None:
            carry |= {"tts_capacity": self.tts_carry.capacity, "tts_bytes": self.tts_carry.nbytes}
        if self.audio_carry is not None:
            carry |= {
                "audio_capacity": self.audio_carry.capacity,
                "audio_length": self.audio_carry.length,
                "audio_bytes": self.audio_carry.nbytes,
            }
        config = self.decoder._window_config
        return {
            "vendor": self.vendor,
            "stages": stages,
            "per_unit": list(self.per_unit),
            "replay": {name: op.counters.to_dict() for name, op in self.ops.items()},
            "fallbacks": dict(self.fallbacks),
            "sampled": dict(self.sampled),
            "window": dict(self.window)
            | {
                "mode": config.sliding_window_mode,
                "high": config.basic_window_high_tokens,
                "low": config.basic_window_low_tokens,
            },
            "carry": carry,
            "sdpa_backend": self.backend,
            "kernels": self.kernels,
            "decode_attention": self.decode,
            "extent_step": self.extent_step,
            "compile": _compile_stats() if self.kernels == "fused" else {},
            "sdpa_refused": self.backend_refused,
        }

    # -- installation -----------------------------------------------------------------------

    def _install(self) -> None:
        d, model = self.duplex, getattr(self.duplex, "model", None)
        self._wrap(d, "streaming_prefill", self._timed_unit("llm_prefill", start=True))
        self._wrap(d, "streaming_generate", self._timed_unit("llm_decode", start=False))
        if model is not None and hasattr(model, "get_audio_embedding_streaming"):
            self._wrap(model, "get_audio_embedding_streaming", self._timed("audio_encoder"))
        if self.tts_step is not None and model is not None:
            chunk = self._timed("tts_head")(self._generate_chunk)
            self._wrap(model.tts, "generate_chunk", lambda original: chunk)
        self._install_steps()

    def _install_steps(self) -> None:
        self._wrap(self.decoder, "feed", lambda original: self._feed)
        self._wrap(self.decoder, "_drop_tokens_from_cache", lambda original: self._drop)
        if self.sampler is not None:
            self._wrap(self.decoder, "decode", lambda original: self._decode)
            self._wrap(self.decoder, "embed_token", lambda original: self._embed_token)
        if self.tts_step is not None:
            self._wrap(self.duplex.model.tts.model, "forward", lambda original: self._tts_forward)
        if self.audio_step is not None:
            self._wrap(self.duplex.model.apm, "forward", lambda original: self._apm_forward)

    def _uninstall_steps(self) -> None:
        for name in ("feed", "_drop_tokens_from_cache", "decode", "embed_token"):
            self._unwrap(self.decoder, name)
        if self.tts_step is not None:
            self._unwrap(self.duplex.model.tts.model, "forward")
        if self.audio_step is not None:
            self._unwrap(self.duplex.model.apm, "forward")

    def _wrap(self, obj: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(obj, name)
        self._originals.setdefault((id(obj), name), original)
        object.__setattr__(obj, name, make(self._originals[(id(obj), name)]))

    def _unwrap(self, obj: Any, name: str) -> None:
        if name in vars(obj):
            object.__delattr__(obj, name)

    def _vendor(self, obj: Any, name: str) -> Any:
        return self._originals[(id(obj), name)]

    # -- the LLM ----------------------------------------------------------------------------

    def _feed(self, embeds: Tensor, return_logits: bool = False) -> Any:
        dec = self.decoder
        ahead = self._take_ahead(embeds, return_logits)
        if ahead is not None:
            return ahead
        n = int(embeds.size(0))
        if not self._adopt_llm() or not self.llm_carry.fits(n):
            if dec.cache is self.llm_view:
                self.fallbacks["llm_carry_full"] += 1
                self._export_llm()
            return self._vendor(dec, "feed")(embeds, return_logits)
        start, extent = self.llm_carry.length, self.llm_carry.extent(n)
        positions = torch.arange(start, start + n, device=embeds.device).unsqueeze(0)
        x = embeds.unsqueeze(0)
        buffer = self.llm_carry.buffer
        with torch.no_grad():
            if return_logits:
                logits, hidden = self._run("llm.step", x, positions, positions[0], buffer, extent)
            else:
                self._run("llm.feed", x, positions, positions[0], buffer, extent)
        self.llm_carry.length = start + n
        dec.cache = self.llm_view
        return (logits, hidden) if return_logits else None

    def _adopt_llm(self) -> bool:
        """Whether the decoder's cache is (now) the carry: None starts it empty; a cache the
        vendor built (its context window mode, a fallback) is copied in when it fits."""
        cache = self.decoder.cache
        if cache is self.llm_view:
            return True
        if cache is None:
            self.llm_carry.length = 0
            return True
        pairs = cache_pairs(cache)
        if not pairs or pairs[0][0].shape[-2] > self.llm_carry.capacity:
            self.fallbacks["llm_foreign_cache"] += 1
            return False
        self.llm_carry.load(pairs)
        self.fallbacks["llm_cache_adopted"] += 1
        self.decoder.cache = self.llm_view
        return True

    def _export_llm(self) -> None:
        """Hand the carry's live values to the vendor's code as a cache of its own form."""
        if self.decoder.cache is self.llm_view:
            self.decoder.cache = tuple((k.clone(), v.clone()) for k, v in self.llm_carry.pairs())

    def _drop(self, length: int) -> bool:
        """The window's upkeep: the vendor's own drop on its cache form, copied back (eager)."""
        dec = self.decoder
        self._ahead = None
        ours = dec.cache is self.llm_view
        before = self.llm_carry.length
        if ours:
            self._export_llm()
        done = bool(self._vendor(dec, "_drop_tokens_from_cache")(length))
        if ours:
            self.llm_carry.load(cache_pairs(dec.cache))
            dec.cache = self.llm_view
            self.fallbacks["window_upkeep_eager"] += 1
            if done:
                self.window["slides"] += 1
                self.window["tokens_dropped"] += before - self.llm_carry.length
        return done

    # -- the TTS head -----------------------------------------------------------------------

    def _tts_forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        past_key_values: Any = None,
        inputs_embeds: Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        carry, core = self.tts_carry, self.duplex.model.tts.model
        assert carry is not None
        usable = input_ids is None and attention_mask is None and inputs_embeds is not None
        usable = usable and position_ids is not None
        if usable and past_key_values is None:
            carry.length = 0
        elif usable and past_key_values is not self.tts_view:
            self.fallbacks["tts_foreign_cache"] += 1
            usable = False
        if not usable or not carry.fits(int(inputs_embeds.shape[1])):  # type: ignore[union-attr]
            if past_key_values is self.tts_view:
                self.fallbacks["tts_carry_full"] += 1
                past_key_values = tuple((k.clone(), v.clone()) for k, v in carry.pairs())
            return self._vendor(core, "forward")(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                past_key_values=past_key_values, inputs_embeds=inputs_embeds, **kwargs,
            )  # fmt: skip
        assert inputs_embeds is not None and position_ids is not None
        n = int(inputs_embeds.shape[1])
        start, extent = carry.length, carry.extent(n)
        slots = torch.arange(start, start + n, device=inputs_embeds.device)
        hidden = self._run("tts.step", inputs_embeds, position_ids, slots, carry.buffer, extent)
        carry.length = start + n
        return SimpleNamespace(last_hidden_state=hidden, past_key_values=self.tts_view)

    # -- replay and warm-up -----------------------------------------------------------------

    def _run(self, name: str, *args: Any) -> Any:
        op = self.ops[name]
        return op(*args) if self.arm().replay else op.fn(*args)

    def _carry(self, step: CarryStep, dtype: torch.dtype) -> KVCarry:
        layers, _, kv_heads, capacity, head_dim = step.carry_shape()
        carry = KVCarry(layers, kv_heads, capacity, head_dim, dtype=dtype, device=self.device)
        if self.extent_step:
            carry.ladder(self.extent_step)
        return carry

    def _catalog(
        self,
        carry: KVCarry,
        hidden: int,
        dtype: torch.dtype,
        lengths: tuple[int, ...],
    ) -> Catalog:
        dev = self.device
        calls = []
        for n in lengths:
            positions = TensorSpec((1, n), torch.int64, dev)
            slots = TensorSpec((n,), torch.int64, dev, stride=(1,))
            x = TensorSpec((1, n, hidden), dtype, dev)
            calls += [(x, positions, slots, carry.buffer, e) for e in carry.extents]
        return Catalog.of_calls(calls)

    # -- timing -----------------------------------------------------------------------------

    def _sync(self) -> None:
        if self.timing and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _timed(self, stage: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def timed(*args: Any, **kwargs: Any) -> Any:
                outer = self._stage
                self._sync()
                t0 = time.perf_counter()
                self._stage = stage
                try:
                    with self._span(stage):
                        return original(*args, **kwargs)
                finally:
                    self._sync()
                    dt = time.perf_counter() - t0
                    self._unit[stage] = self._unit.get(stage, 0.0) + dt
                    if outer is not None:  # an inner stage's time is not its outer's
                        self._unit[outer] = self._unit.get(outer, 0.0) - dt
                    self._stage = outer

            return timed

        return make

    def _timed_unit(self, stage: str, *, start: bool) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            inner = self._timed(stage)(original)

            def unit(*args: Any, **kwargs: Any) -> Any:
                if start:
                    self._unit = {}
                out = inner(*args, **kwargs)
                if not start:
                    self.per_unit.append(dict(self._unit))
                    self._unit = {}
                return out

            return unit

        return make

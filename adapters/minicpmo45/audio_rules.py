"""The backbone rules' audio encoder: one unit of audio, one exact signature, over its carry.

:class:`AudioRules` is the part of :class:`~adapters.minicpmo45.rules.BackboneRules` that
replaces ``model.apm.forward`` (the call ``get_audio_embedding_streaming`` makes once a unit)
by :class:`~.audio_step.AudioStep` (operator ``audio.step``) over an audio
:class:`~.kv.KVCarry` sized by the encoder's position table; the vendor's projection, pooling
and its cache bookkeeping around it run unchanged: it sees a :class:`~.kv.CarryView` as
``model.audio_past_key_values`` (its length check reads ``[0][0].shape[2]``), and its reset at
the table's end (None) starts the carry empty. The catalog is the declaration's units (mel
frames and extra context frames of the first unit and of every later one). What the step does
not follow (another output layer, fp16's clamp, CNN padding, a cache the vendor built, a full
carry) runs the vendor's forward, counted in ``fallbacks``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from adapters.minicpmo45.audio_step import AudioStep
from adapters.minicpmo45.kv import CarryView, KVCarry, attribute, round_up
from engine.arms import Arm
from engine.replay import ReplayEngine, ReplayOp
from engine.signature import Catalog, TensorSpec

__all__ = ["AudioRules", "AudioUnit"]

AudioUnit = tuple[int, int, int]
"""``(mel_frames, prefix, suffix)``: one unit of audio as the streaming processor cuts it."""


class AudioRules:
    """The audio encoder of :class:`~adapters.minicpmo45.rules.BackboneRules` (module
    docstring)."""

    duplex: Any
    replay: ReplayEngine
    arm: Callable[[], Arm]
    device: torch.device
    backend: str
    ops: dict[str, ReplayOp]
    fallbacks: Counter[str]
    audio_step: AudioStep | None
    audio_carry: KVCarry | None
    audio_view: CarryView
    audio_units: tuple[AudioUnit, ...]
    audio_mels: int

    def _vendor(self, obj: Any, name: str) -> Any:
        raise NotImplementedError

    def _run(self, name: str, *args: Any) -> Any:
        raise NotImplementedError

    def _audio(
        self, capacity_from: str, round_to: int, extent_step: int, units: tuple[AudioUnit, ...]
    ) -> None:
        """``audio.step`` on the model's ``apm`` when the vendor reads its last layer; the
        carry's slots: the value at ``capacity_from`` (of the model) rounded up to
        ``round_to``, attended in extents of ``extent_step`` (0: its whole capacity)."""
        self.audio_step, self.audio_carry, self.audio_units = None, None, units
        model = getattr(self.duplex, "model", None)
        apm = getattr(model, "apm", None)
        if apm is None:
            return
        capacity = round_up(int(attribute(model, capacity_from)), round_to)
        dtype = apm.conv1.weight.dtype
        refused = (
            "audio_encoder_layer" if getattr(model, "audio_encoder_layer", -1) != -1
            else "audio_fp16" if dtype == torch.float16
            else ""
        )  # fmt: skip
        if refused:
            self.fallbacks[refused] += 1
            return
        self.audio_step = step = AudioStep(apm, capacity, self.backend)
        layers, _, heads, slots, head_dim = step.carry_shape()
        self.audio_carry = carry = KVCarry(
            layers, heads, slots, head_dim, dtype=dtype, device=self.device
        )
        if extent_step:
            carry.ladder(extent_step)
        self.audio_view = CarryView(carry)
        self.audio_mels = mels = int(apm.config.num_mel_bins)
        calls = []
        for frames, prefix, suffix in units:
            n = step.frames(frames, prefix, suffix)
            mel = TensorSpec((1, mels, frames), torch.float32, self.device)
            index = TensorSpec((n,), torch.int64, self.device, stride=(1,))
            calls += [(mel, index, carry.buffer, prefix, suffix, e) for e in carry.extents]
        self.ops["audio.step"] = self.replay.register(
            "audio.step", step.hidden, aliased=["buffer"], extra_key=lambda: self.backend,
            catalog=Catalog.of_calls(calls),
        )  # fmt: skip

    def _apm_forward(
        self,
        input_features: Tensor,
        attention_mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        use_extra_context: bool | None = False,
        prefix_extra_frames: int | None = 1,
        suffix_extra_frames: int | None = 1,
        cnn_min_length: int | None = None,
    ) -> Any:
        """The vendor's ``MiniCPMWhisperEncoder.forward`` as ``get_audio_embedding_streaming``
        calls it: ours over the carry, else the vendor's (counted)."""
        step, carry = self.audio_step, self.audio_carry
        assert step is not None and carry is not None
        frames = int(input_features.shape[-1])
        extra = bool(use_extra_context)
        prefix = int(prefix_extra_frames or 0) if extra else 0
        suffix = int(suffix_extra_frames or 0) if extra else 0
        refused = (
            "audio_call" if not use_cache or head_mask is not None or output_attentions
            or int(input_features.shape[0]) != 1
            or (cnn_min_length is not None and frames < cnn_min_length)
            else "audio_foreign_cache"
            if past_key_values is not None and past_key_values is not self.audio_view
            else ""
        )  # fmt: skip
        if not refused:
            if past_key_values is None:
                carry.length = 0
            if not carry.fits(step.frames(frames, prefix, suffix)):
                refused = "audio_carry_full"
        if refused:
            self.fallbacks[refused] += 1
            if past_key_values is self.audio_view:
                past_key_values = self._audio_pairs()
            return self._vendor(self.duplex.model.apm, "forward")(
                input_features, attention_mask=attention_mask, head_mask=head_mask,
                output_attentions=output_attentions, output_hidden_states=output_hidden_states,
                return_dict=return_dict, past_key_values=past_key_values, use_cache=use_cache,
                use_extra_context=use_extra_context, prefix_extra_frames=prefix_extra_frames,
                suffix_extra_frames=suffix_extra_frames, cnn_min_length=cnn_min_length,
            )  # fmt: skip
        n = step.frames(frames, prefix, suffix)
        start, extent = carry.length, carry.extent(n)
        slots = torch.arange(start, start + n, device=self.device)
        mel = input_features.to(self.device).contiguous()  # the processor's: a strided slice
        hidden = self._run("audio.step", mel, slots, carry.buffer, prefix, suffix, extent)
        carry.length = start + n
        return SimpleNamespace(
            last_hidden_state=hidden,
            hidden_states=(hidden,) if output_hidden_states else None,
            attentions=None,
            past_key_values=self.audio_view,
        )

    def _audio_pairs(self) -> list[tuple[Tensor, Tensor]]:
        """The carry's live values as the legacy list the vendor's forward takes."""
        assert self.audio_carry is not None
        return [(k.clone(), v.clone()) for k, v in self.audio_carry.pairs()]

    def _export_audio(self) -> None:
        """Hand the carry to the vendor's code (``use_vendor``) as a cache of its own form."""
        model = self.duplex.model
        if self.audio_step is not None and model.audio_past_key_values is self.audio_view:
            model.audio_past_key_values = self._audio_pairs()

"""MiniCPM-o 4.5 through the family face: the user's checkpoint listens and thinks, ours speaks.

:meth:`MiniCPMO45Family.load` builds, from a local checkpoint folder only:

1. consent and folder checks (:meth:`check`, torch-free): the folder's own code runs only when
   the user agreed (``trust_checkpoint_code``: the settings checkbox, ``--trust-checkpoint-code``
   on ``converse``); the transformers version the code needs (:data:`~.loader.TRANSFORMERS_PIN`);
2. the GPU's free memory against what the session will hold (:func:`~.loader.check_memory`);
3. our Token2Wav decoder under the request's arm (the ``synthetic`` family's ``load_speech``:
   the checkpoint's ``assets/token2wav`` at full size, the voice recording through its tokenizer
   and speaker model as ``synth --prompt-wav`` does), warmed up and sealed;
4. the checkpoint's duplex object (:func:`~.loader.load_duplex`: bf16, audio and TTS on, vision
   off, the vendor's Token2wav not built) wrapped as the backbone
   (:class:`~.backbone.DuplexBackbone`, the recording as its reference audio);
5. the period model: :class:`~engine.windowed.WindowedSynthesis` with the vendor's own call rule
   (:class:`~.windows.DuplexWindower`), at the native 1-s unit, 16 kHz in, 24 kHz out; audit
   mode on our decoder's carry when asked for (as the ``synthetic`` family).

**The stock envelope.** Under a state-rule arm (S, SR, SRc) our flow is loaded without the
stock static cache envelope (≈ 2.2 GB at full size): the carry is all the state it needs. The
session can then switch live among S, SR and SRc; a stock arm (eager, R, Rc) needs the
envelope, so a session that should compare against eager starts under a stock arm (and holds
the envelope from the start). ``ModelRequest.envelope=False`` forbids the envelope outright.

**Model size** applies to our decoder: ``full`` reads ``assets/token2wav`` from the checkpoint;
``small`` is the seeded random small Token2Wav (a CPU run of the loop: the LLM is the
checkpoint's, the audio is not speech).

Threads: the engine thread. Torch and transformers are imported inside ``load`` only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.face import (
    FamilyError,
    Footprint,
    LoadedModel,
    ModelRequest,
    Progress,
    PublicCheckpoint,
)
from adapters.minicpmo45.folder import check_folder, weight_bytes
from adapters.token2wav.family import SYNTHETIC
from engine.arms import switchable_arms
from engine.sizes import GIB, byte_text

if TYPE_CHECKING:
    import numpy as np

    from adapters.minicpmo45.rules import BackboneSpec
    from adapters.minicpmo45.synthesis import DuplexSynthesis
    from adapters.token2wav.family import SpeechModel

__all__ = ["MINICPMO45", "MiniCPMO45Family", "period_model"]

TRUST_FIX = (
    "it runs Python code from that folder: pass --trust-checkpoint-code on the command line, or "
    "tick 'Run the checkpoint's own code' in Settings, if you trust where it came from"
)


@dataclass(frozen=True)
class MiniCPMO45Family:
    """MiniCPM-o 4.5 (its own code) with our Token2Wav; an ``adapters.face.Family``."""

    key: str = "minicpmo45"
    title: str = "MiniCPM-o 4.5 (the checkpoint's code) + our Token2Wav"
    declaration: str = SYNTHETIC.declaration  # the decoder's: MiniCPM-o 4.5's Token2Wav
    reads: frozenset[str] = frozenset(
        {"device", "model_size", "checkpoint", "voice", "arm", "audit", "seed",
         "trust_checkpoint_code"}
    )  # fmt: skip
    full_duplex: bool = True
    ships_weights: bool = False
    downloads: tuple[PublicCheckpoint, ...] = (
        PublicCheckpoint(
            "MiniCPM-o 4.5, the whole model", "openbmb/MiniCPM-o-4_5", ("*",), "",
            "the whole checkpoint: its weights, its own code and the Token2Wav voice",
            "minicpmo45",
        ),
    )  # fmt: skip

    def check(self, request: ModelRequest) -> None:
        """Folder, consent and decoder request (torch-free)."""
        if request.checkpoint is None:
            raise FamilyError(
                "MiniCPM-o 4.5 needs its checkpoint folder (MiniCPM-o-4_5: config.json, "
                "modeling_minicpmo.py, model*.safetensors): choose it",
                "checkpoint",
            )
        folder = check_folder(request.checkpoint)
        if not request.trust_checkpoint_code:
            raise FamilyError(
                f"MiniCPM-o 4.5 runs the model code shipped in {folder.path} "
                f"({', '.join(folder.code)}); {TRUST_FIX}",
                "trust_checkpoint_code",
            )
        if request.voice is not None and request.model_size != "full":
            raise FamilyError(
                f"voice {request.voice} is made into a voice by the checkpoint's token2wav "
                "models, which the small decoder does not use: set the model size to full, or "
                "clear the voice",
                "voice",
            )
        SYNTHETIC.check(self._decoder_request(request))

    def load(self, request: ModelRequest, progress: Progress) -> LoadedModel:
        from adapters.minicpmo45.loader import LoadFacts, check_transformers, load_duplex
        from adapters.minicpmo45.rules import BackboneSpec

        self.check(request)
        assert request.checkpoint is not None, "check() refuses a request without a checkpoint"
        folder = check_folder(request.checkpoint)
        facts = LoadFacts(transformers=check_transformers())
        decoder = self._decoder_request(request)
        memory = self._check_memory(request, decoder, folder)
        speech = SYNTHETIC.load_speech(decoder, lambda stage, f: progress(stage, 0.2 * f))
        spec = BackboneSpec.read()
        duplex = load_duplex(folder, request.device, facts, **spec.duplex_kwargs())
        progress("loading", 1.0)
        model = period_model(speech, duplex, request, spec)
        audit = SYNTHETIC.audit_mode(speech) if request.audit else None
        backbone = model.warm_up_load(lambda stage, f: progress(stage, 0.5 * f))
        share = (0.5, 0.5) if backbone is not None else (0.0, 1.0)
        warmup = SYNTHETIC.warm_up(
            speech, request, lambda stage, f: progress(stage, share[0] + share[1] * f), audit
        )
        if backbone is not None:
            warmup["backbone"] = backbone
        memory.update(_held(request.device))
        return LoadedModel(
            model=model,
            replay=speech.replay,
            title=f"{self.title} ({speech.size.name} decoder)",
            declaration=speech.declaration.name,
            weights_synthetic=decoder.checkpoint is None,
            stages=_stages(model.backbone),
            warmup=warmup,
            facts={
                "checkpoint_code": list(folder.code),
                "transformers": facts.transformers,
                "vendor_tts_skipped": facts.vendor_tts_skipped,
                "decoder_size": speech.size.name,
                "decoder_weights": str(decoder.checkpoint or "seeded random"),
                "voice_frames": speech.voice.frames,
                "envelope": decoder.envelope,
                "switchable_arms": [str(arm) for arm in switchable_arms(decoder.envelope)],
                "backbone_rules": _rules_facts(model.backbone),
                "memory": memory,
                **({"audit_scope": audit.header()} if audit is not None else {}),
            },
            audit=audit,
            has_text=True,
            switchable_arms=switchable_arms(decoder.envelope),
            warms_at_switch=True,  # DuplexSynthesis.set_arm
        )

    # -- internals ---------------------------------------------------------------------------

    def _decoder_request(self, request: ModelRequest) -> ModelRequest:
        """What our Token2Wav is loaded from: the checkpoint's token2wav folder at full size,
        the stock envelope only under a stock arm (module docstring)."""
        assert request.checkpoint is not None
        full = request.model_size == "full"
        return dataclasses.replace(
            request,
            checkpoint=check_folder(request.checkpoint).token2wav if full else None,
            envelope=request.envelope and not request.arm.state_rule,
        )

    def footprint(self, request: ModelRequest) -> Footprint:
        """The checkpoint folder and the GPU memory ``load`` checks for (at full size)."""
        packages = ("transformers",)
        try:
            folder = check_folder(request.checkpoint) if request.checkpoint is not None else None
        except FamilyError:
            folder = None
        full = dataclasses.replace(request, model_size="full")
        decoder = self._decoder_request(full) if folder is not None else None
        llm, decoder_bytes, headroom = self._memory(full, decoder, folder)
        parts = (
            f"{byte_text(decoder_bytes)} our Token2Wav under {request.arm}, "
            f"{byte_text(headroom)} headroom"
        )
        if folder is None:
            return Footprint((), f"a CUDA GPU for its weights in bf16, {parts}", packages)
        needed = llm + decoder_bytes + headroom
        needs = f"a CUDA GPU with {byte_text(needed)}: {byte_text(llm)} weights in bf16, {parts}"
        return Footprint((folder.path,), needs, packages)

    def _memory(
        self, request: ModelRequest, decoder: ModelRequest | None, folder: Any
    ) -> tuple[int, int, int]:
        """(LLM weights without vision, our Token2Wav with its state, headroom) in bytes."""
        from adapters.minicpmo45.loader import HEADROOM_BYTES
        from engine.declaration_io import load_declaration
        from engine.plan import make_plan

        llm = weight_bytes(folder) if folder is not None else 0
        flow = 0
        if decoder is not None and decoder.checkpoint is not None:
            flow = _file_bytes(decoder.checkpoint)
        state = make_plan(load_declaration(self.declaration)).price(request.arm)
        return llm, flow + state.total_bytes, HEADROOM_BYTES

    def _check_memory(
        self, request: ModelRequest, decoder: ModelRequest, folder: Any
    ) -> dict[str, Any]:
        from adapters.minicpmo45.loader import check_memory

        llm, decoder_bytes, headroom = self._memory(request, decoder, folder)
        needed = llm + decoder_bytes + headroom
        parts = (
            f"{byte_text(llm)} weights in bf16 without vision, {byte_text(decoder_bytes)} our "
            f"Token2Wav under {request.arm}, {byte_text(headroom)} headroom"
        )
        seen = check_memory(request.device, needed, parts)
        if request.device == "cpu":  # bf16 on the host: ~19 GiB, checked before anything loads
            from adapters.host_memory import check_host_memory

            fix = "close other programs, or use a CUDA GPU"
            check_host_memory(needed, "MiniCPM-o 4.5", parts, fix)
        return {
            "weights_gib": round(llm / GIB, 2),
            "token2wav_gib": round(decoder_bytes / GIB, 2),
            "needed_gib": round(needed / GIB, 2),
            **seen,
        }


def period_model(
    speech: SpeechModel, duplex: Any, request: ModelRequest, spec: BackboneSpec | None = None
) -> DuplexSynthesis:
    """The duplex object as backbone, the vendor's call rule, our decoder: one 1-s unit a step.

    The unit is the declaration's (``period_tokens`` at the token clock: 25 tokens = 1 s), the
    microphone 16 kHz (the rate the duplex object and silero-vad hear), the output the decoder's.
    With ``spec`` (the backbone declaration) and a duplex object that has the vendor's decoder,
    the backbone rules are installed (:mod:`adapters.minicpmo45.rules`); ``backbone.rules``
    holds them. Their catalog is captured by the load (``warm_up_load``) or at the first live
    switch into a replay arm (:class:`~adapters.minicpmo45.synthesis.DuplexSynthesis`).
    """
    from adapters.minicpmo45.backbone import DuplexBackbone
    from adapters.minicpmo45.rules import BackboneRules
    from adapters.minicpmo45.synthesis import DuplexSynthesis
    from adapters.minicpmo45.windows import DuplexWindower
    from adapters.turns.vad import RATE, VoiceActivity

    values = speech.values
    rules = None
    if spec is not None and hasattr(getattr(duplex, "decoder", None), "m"):
        stream = speech.speech
        rules = BackboneRules(duplex, speech.replay, lambda: stream.arm, spec)
    backbone = DuplexBackbone(
        duplex,
        period_s=values["period_tokens"] / speech.declaration.clock_rate("token", values),
        input_rate=RATE,
        device=request.device,
        ref_audio=_ref_audio(request.voice, RATE) if request.voice is not None else None,
        vad=VoiceActivity(),
        rules=rules,
    )
    windower = DuplexWindower.like(speech.windower, backbone.flushing)
    return DuplexSynthesis(backbone, speech, windower, request.seed)


def _stages(backbone: Any) -> tuple[str, ...]:
    """The period's spans: the backbone's own stages where its rules are installed."""
    from adapters.minicpmo45.rules import STAGES

    inner = STAGES if getattr(backbone, "rules", None) is not None else ()
    return ("backbone", *inner, "flow", "vocoder")


def _rules_facts(backbone: Any) -> dict[str, Any] | None:
    """The backbone rules' carries and pinned attention backend, for the trace header (None:
    the duplex object has no decoder of the vendor's form, so its own code runs)."""
    rules = getattr(backbone, "rules", None)
    if rules is None:
        return None
    stats = rules.stats()
    return {"carry": stats["carry"], "window": stats["window"], "sdpa": stats["sdpa_backend"]}


def _held(device: str) -> dict[str, float]:
    """What the session holds on its GPU once loaded and warmed up (GiB), for the trace."""
    import torch

    if not device.startswith("cuda"):
        return {}
    return {
        "held_allocated_gib": round(torch.cuda.memory_allocated(device) / GIB, 2),
        "held_reserved_gib": round(torch.cuda.memory_reserved(device) / GIB, 2),
    }


def _file_bytes(token2wav: Path) -> int:
    """Our decoder's weights on the device (fp32 as stored): flow and vocoder files."""
    return sum((token2wav / name).stat().st_size for name in ("flow.pt", "hift_original.pt"))


def _ref_audio(voice: Path, rate: int) -> np.ndarray:
    """The voice recording as the LLM's reference audio: mono float32 at ``rate``."""
    import soundfile
    import soxr

    data, source_rate = soundfile.read(str(voice), dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    resampled: np.ndarray = soxr.resample(mono, source_rate, rate) if source_rate != rate else mono
    return resampled.astype("float32", copy=False)


MINICPMO45 = MiniCPMO45Family()

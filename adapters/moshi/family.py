"""Moshi's face: a full-duplex speech-text model, one 80-ms frame in, one frame out.

:meth:`MoshiFamily.load` builds, from the request and the declaration alone: the LM and Mimi (a
checkpoint folder, or seeded random weights at the released 7B config, ``full``, or at the
small config, ``small``, which converses in real time on one CPU core), the vendor's ``LMGen``
with its sampling defaults (temperature 0.8/0.7, top-k 250/25; a folder's ``config.json`` may
set others), the replay engine and the frame stream under the request's arm, then the warm-up
(every replay arm's catalog captured: arms switch live without a capture) and ``seal()``. After
warm-up the generators are re-seeded, so a conversation depends only on the request and its
input.

:class:`MoshiPeriods` is the period model: per period one frame of microphone audio (the
declared ``samples_per_frame`` at the frame clock's sample rate) through Mimi's encoder, the LM
and Mimi's decoder, the text piece the model said (its inner monologue: what it says, in
sentencepiece pieces; padding says nothing) and the speech frame.

Phase rule: a period is SPEAK when the model said a text piece or its speech frame is audible
(peak above :data:`AUDIBLE_PEAK`), else LISTEN. A turn ends at the first LISTEN period after a
SPEAK one. Moshi listens while it speaks and decides itself when to yield, so there is no
barge-in to detect: ``barge_in`` stays False. ``voice_prob`` is the microphone's level (RMS
over :data:`VOICE_RMS`, capped at 1): Moshi has no separate voice-activity detector.

Threads: the engine thread (it owns every CUDA call). Torch is imported inside ``load`` only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.face import FamilyError, Footprint, LoadedModel, ModelRequest, Progress, gib
from adapters.moshi.config import CheckpointError, DamagedFile, check_folder
from adapters.moshi.vendor import VendorVersionError, require_verified

if TYPE_CHECKING:
    import numpy as np

    from adapters.moshi.checkpoint import Vocabulary
    from adapters.moshi.stream import MoshiStream
    from engine.arms import Arm
    from engine.duplex import PeriodStep, SpanFactory
    from engine.replay import ReplayEngine

__all__ = ["MOSHI", "MoshiFamily", "MoshiPeriods"]

AUDIBLE_PEAK = 1e-2  # -40 dBFS: a speech frame quieter than this is silence
VOICE_RMS = 0.05  # microphone RMS read as certain voice (voice_prob 1)
SAMPLING_KEYS = ("temp", "temp_text", "top_k", "top_k_text", "use_sampling")


@dataclass(frozen=True)
class MoshiFamily:
    """The Moshi declaration's face; an ``adapters.face.Family``."""

    key: str = "moshi"
    title: str = "Moshi (Kyutai): 7B speech-text model + Mimi codec"
    declaration: str = "moshi"
    reads: frozenset[str] = frozenset({"device", "model_size", "checkpoint", "arm", "seed"})
    full_duplex: bool = True

    def check(self, request: ModelRequest) -> None:
        """The ``moshi`` package's version, the folder and its files (torch-free)."""
        require_moshi()
        if request.checkpoint is None:
            return
        try:
            check_folder(request.checkpoint)
        except CheckpointError as error:
            fix = (
                "download it again"
                if isinstance(error, DamagedFile)
                else "choose a Moshi folder (e.g. a download of kyutai/moshiko-pytorch-bf16)"
            )
            raise FamilyError(f"{error}: {fix}", "checkpoint") from None
        if request.model_size == "small":
            raise FamilyError(
                f"checkpoint {request.checkpoint} sets its own size (the 7B, or what its "
                "config.json says), but the model size is small (auto picks small on "
                f"{request.device}): set the model size to full",
                "model_size",
            )

    def footprint(self, request: ModelRequest) -> Footprint:
        """The checkpoint folder; the GPU memory of the full size from its declaration (rings),
        its files (weights as stored, bf16) and the workspace."""
        from adapters.moshi.config import WORKSPACE_BYTES, size_for
        from engine.declaration_io import load_declaration

        rings = size_for("full", load_declaration(self.declaration)).ring_bytes(2)
        parts = f"{gib(rings)} rings (its declaration) and {gib(WORKSPACE_BYTES)} workspace"
        folder = request.checkpoint
        try:
            files = check_folder(folder) if folder is not None else None
        except CheckpointError:
            files = None
        if files is None:
            needs = f"a CUDA GPU for its weights in bf16, {parts}"
            return Footprint((), needs, ("moshi",))
        weights = files.moshi.stat().st_size + files.mimi.stat().st_size
        total = weights + rings + WORKSPACE_BYTES
        needs = f"a CUDA GPU with {gib(total)}: {gib(weights)} weights, {parts}"
        return Footprint((files.folder,), needs, ("moshi",))

    def load(self, request: ModelRequest, progress: Progress) -> LoadedModel:
        import torch
        from moshi.models.lm import LMGen

        from adapters.moshi.checkpoint import build_models
        from adapters.moshi.config import size_for
        from adapters.moshi.stream import MoshiStream
        from engine.declaration_io import load_declaration
        from engine.replay import ReplayEngine

        self.check(request)
        device = torch.device(request.device)
        declaration = load_declaration(self.declaration)
        size = size_for(request.model_size, declaration)
        files = check_folder(request.checkpoint) if request.checkpoint is not None else None
        # Small tensors: more intra-op threads only add barrier waits (see the Token2Wav face).
        torch.set_num_threads(1)
        torch.manual_seed(request.seed)
        progress("loading", 0.0)
        t0 = time.perf_counter()
        try:
            models = build_models(size, files, device, request.seed)
        except CheckpointError as error:
            setting = "device" if "GPU memory" in str(error) else "checkpoint"
            raise FamilyError(str(error), setting) from None
        build_s = time.perf_counter() - t0
        progress("loading", 0.9)
        sampling = {k: v for k, v in models.sampling.items() if k in SAMPLING_KEYS}
        lm_gen = LMGen(models.lm, **sampling)
        replay = ReplayEngine(device)
        values = size.point
        sdpa = declaration.operators["lm_step"].kernels.get("sdpa", "default")
        stream = MoshiStream(
            models.mimi,
            lm_gen,
            replay=replay,
            arm=request.arm,
            samples_per_frame=values["samples_per_frame"],
            sdpa=sdpa if device.type == "cuda" else "default",
        )
        check_rings(stream, values, self.declaration)
        progress("loading", 1.0)
        warmup = warm_up(stream, replay, seed=request.seed, report=progress)
        warmup["build_s"] = round(build_s, 3)
        torch.manual_seed(request.seed)  # the conversation's draws do not depend on the warm-up
        rate = declaration.clock_rate("sample", values)
        model = MoshiPeriods(
            stream,
            models.vocab,
            period_s=values["samples_per_frame"] / rate,
            rate=round(rate),
        )
        weights = "checkpoint" if files is not None else "seeded random weights"
        return LoadedModel(
            model=model,
            replay=replay,
            title=f"Moshi ({size.name}, {weights})",
            declaration=declaration.name,
            weights_synthetic=files is None,
            stages=("encode", "lm", "decode", "frame"),
            warmup=warmup,
            facts={
                "model_size": size.name,
                "temporal_sdpa": stream.ops.sdpa,
                "rings": {k: sorted(v) for k, v in stream.ring_capacities().items()},
                "clock_followers": stream.clock_followers,
                "sampling": {
                    "temp": lm_gen.temp,
                    "temp_text": lm_gen.temp_text,
                    "top_k": lm_gen.top_k,
                    "top_k_text": lm_gen.top_k_text,
                },
            },
            has_text=True,
        )


def require_moshi() -> None:
    """The installed ``moshi`` is the one the families were verified on, or a FamilyError."""
    try:
        require_verified()
    except VendorVersionError as error:
        raise FamilyError(str(error), "family") from None


def check_rings(stream: MoshiStream, values: dict[str, int], declaration: str) -> None:
    """The state rule: every ring holds exactly what the declaration bounds."""
    declared = {
        "lm_kv": values["main_capacity"],
        "depformer_kv": values["depformer_capacity"],
        "mimi_kv": values["mimi_capacity"],
    }
    for region, capacities in stream.ring_capacities().items():
        if capacities != {declared[region]}:
            raise FamilyError(
                f"the model's {region} rings hold {sorted(capacities)} entries, but "
                f"{declaration}.yaml bounds them at {declared[region]}: declare the checkpoint's "
                "value",
                "checkpoint",
            )


def warm_up(
    stream: MoshiStream, replay: ReplayEngine, *, seed: int, report: Progress
) -> dict[str, Any]:
    """Capture every replay arm's catalog (an opening and a steady frame, each seen twice: the
    first warms, the second captures), then reset the stream, restore its arm and seal.

    The microphone frames are seeded noise (never zeros: a silent warm-up would warm nothing a
    conversation does not also reach, but proves less). Every arm is warmed, so a live switch
    replays from its first frame.
    """
    import torch

    from engine.arms import Arm

    arm = stream.arm
    g = torch.Generator().manual_seed(seed)
    frames = [0.1 * torch.randn((1, 1, stream.spf), generator=g) for _ in range(2)]
    replay_arms = [a for a in Arm if a.replay]
    report("capture", 0.0)
    t0 = time.perf_counter()
    for i, a in enumerate(replay_arms):
        stream.set_arm(a)
        for _ in range(2):
            stream.reset()
            for frame in frames:
                stream.step(frame.to(stream.device))
        report("capture", (i + 1) / len(replay_arms))
    stream.reset()
    stream.set_arm(arm)
    if stream.device.type == "cuda":
        torch.cuda.synchronize(stream.device)
    replay.seal()
    totals = replay.snapshot()["total"]
    events = replay.drain_events()
    replay.reset_counters()
    return {
        "arm": str(arm),
        "arms": [str(a) for a in replay_arms],
        "frames": 4 * len(replay_arms),
        "seconds": round(time.perf_counter() - t0, 3),
        "captures": totals.get("captures", 0),
        "capture_s": round(float(totals.get("capture_s", 0.0)), 3),
        "capture_bytes": totals.get("capture_bytes", 0),
        "events": len(events),
    }


class MoshiPeriods:
    """The period model: one frame per period; see the module docstring for the phase rule."""

    def __init__(self, stream: MoshiStream, vocab: Vocabulary, *, period_s: float, rate: int):
        self.stream, self.vocab = stream, vocab
        self.period_s, self.input_rate, self.output_rate = period_s, rate, rate
        self._span: SpanFactory | None = None
        self._speaking = False

    @property
    def arm(self) -> Arm:
        return self.stream.arm

    def set_arm(self, arm: Arm) -> None:
        self.stream.set_arm(arm)

    @property
    def in_turn(self) -> bool:
        return self._speaking

    def set_stage_timer(self, span: SpanFactory | None) -> None:
        self._span = span

    def step(self, mic: np.ndarray) -> PeriodStep:
        import numpy as np
        import torch

        from engine.duplex import PeriodStep, Phase

        pcm = torch.from_numpy(np.ascontiguousarray(mic, dtype=np.float32))
        out = self.stream.step(pcm.to(self.stream.device).view(1, 1, -1), self._span)
        tokens = out.tokens[0, :, 0].tolist()
        text = self.vocab.piece(tokens[0])
        audio = [] if out.pcm is None else [out.pcm[0, 0]]
        audible = out.pcm is not None and float(out.pcm.abs().max()) > AUDIBLE_PEAK
        speaking = bool(text) or audible
        turn_end = self._speaking and not speaking
        self._speaking = speaking
        rms = float(np.sqrt(np.mean(np.square(mic, dtype=np.float64)))) if mic.size else 0.0
        return PeriodStep(
            phase=Phase.SPEAK if speaking else Phase.LISTEN,
            audio=audio,
            voice_prob=min(1.0, rms / VOICE_RMS),
            turn_end=turn_end,
            text=text,
            facts={"tokens": tokens},
        )

    def reset(self) -> None:
        self.stream.reset()
        self._speaking = False


MOSHI = MoshiFamily()

"""PersonaPlex's face: Moshi's stream and clock with PersonaPlex's step and a voice and role.

:meth:`PersonaPlexFamily.load` builds what Moshi's face builds (the LM and Mimi from a checkpoint
folder or seeded random weights, ``LMGen``'s sampling defaults, the replay engine, the stream
under the request's arm, the warm-up and ``seal()``), with the LM's arguments from
``personaplex.yaml`` (``dep_q`` 16 and its delays), :class:`~adapters.personaplex.frame.
PersonaPlexOps` as the stream's step, and the prompt phase (the voice and role the request
names) stepped after every reset: a new conversation re-runs it. After warm-up the generator is
re-seeded and the prompt phase run, so a conversation depends only on the request and its input;
that run's time is the prompt's time to the first answer (``warmup["prompt_s"]``).

The period model is Moshi's (:class:`~adapters.moshi.family.MoshiPeriods`): its tokens carry
the user's codebooks too (rows ``1 + audio_q``...), which it does not read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapters.face import (
    FamilyError,
    Footprint,
    LoadedModel,
    ModelRequest,
    Progress,
    PublicCheckpoint,
)
from adapters.moshi.config import CheckpointError, DamagedFile
from adapters.moshi.family import require_moshi
from adapters.personaplex.config import MAX_VOICE_S, MIN_VOICE_S, ROLES
from engine.sizes import byte_text

if TYPE_CHECKING:
    from adapters.personaplex.config import PersonaPlexFiles

__all__ = ["PERSONAPLEX", "PersonaPlexFamily"]


@dataclass(frozen=True)
class PersonaPlexFamily:
    """The PersonaPlex declaration's face; an ``adapters.face.Family``."""

    key: str = "personaplex"
    title: str = "PersonaPlex (NVIDIA): Moshi 7B with a chosen voice and role"
    declaration: str = "personaplex"
    reads: frozenset[str] = frozenset(
        {"device", "model_size", "checkpoint", "arm", "seed", "voice", "role"}
    )
    full_duplex: bool = True
    ships_weights: bool = False
    downloads: tuple[PublicCheckpoint, ...] = ()  # gated: the user downloads it (README)
    roles: tuple[str, ...] = tuple(ROLES)  # the role presets, by name (any text is a role too)

    def voice_seconds(self) -> tuple[float, float]:
        """The shortest and longest voice recording it takes, in seconds (torch-free)."""
        return MIN_VOICE_S, MAX_VOICE_S

    def check(self, request: ModelRequest) -> None:
        """The ``moshi`` version, the folder, its files and the voice's name (torch-free)."""
        require_moshi()
        files = self._files(request)
        if files is not None and request.model_size == "small":
            raise FamilyError(
                f"checkpoint {request.checkpoint} is the 7B, but the model size is small (auto "
                f"picks small on {request.device}): set the model size to full",
                "model_size",
            )
        voice = request.voice
        if voice is not None and not voice.is_file():
            offered = files.voices if files is not None else {}
            if str(voice) not in offered:
                names = ", ".join(offered) or "none without a checkpoint folder"
                raise FamilyError(
                    f"voice {str(voice)!r} is neither a file nor one of the folder's voices "
                    f"({names}): pick a voice by name, or a recording",
                    "voice",
                )

    def footprint(self, request: ModelRequest) -> Footprint:
        """The folder; the GPU memory of the full size: rings (declaration), files, workspace."""
        from adapters.moshi.config import WORKSPACE_BYTES, state_bytes
        from adapters.personaplex.config import size_for
        from engine.declaration_io import load_declaration

        declaration = load_declaration(self.declaration)
        rings = state_bytes(declaration, size_for("full", declaration))
        parts = (
            f"{byte_text(rings)} rings (its declaration) and {byte_text(WORKSPACE_BYTES)} workspace"
        )
        try:
            files = self._files(request)
        except FamilyError:
            files = None
        if files is None:
            return Footprint((), f"a CUDA GPU for its weights in bf16, {parts}", ("moshi",))
        weights = files.files.moshi.stat().st_size + files.files.mimi.stat().st_size
        total = weights + rings + WORKSPACE_BYTES
        needs = f"a CUDA GPU with {byte_text(total)}: {byte_text(weights)} weights, {parts}"
        return Footprint((files.folder,), needs, ("moshi",))

    def load(self, request: ModelRequest, progress: Progress) -> LoadedModel:
        import torch
        from moshi.models import loaders
        from moshi.models.lm import LMGen

        from adapters.moshi.checkpoint import build_models
        from adapters.moshi.periods import MoshiPeriods, check_regions, warm_up
        from adapters.moshi.regions import ring_shapes
        from adapters.moshi.stream import MoshiStream
        from adapters.personaplex.checkpoint import load_lm
        from adapters.personaplex.config import lm_kwargs, size_for
        from adapters.personaplex.frame import PersonaPlexOps
        from adapters.personaplex.prompt import PersonaPlexPrompt
        from adapters.personaplex.voice import resolve_role, resolve_voice
        from engine.declaration_io import load_declaration
        from engine.replay import ReplayEngine

        self.check(request)
        files = self._files(request)
        device = torch.device(request.device)
        declaration = load_declaration(self.declaration)
        size = size_for(request.model_size, declaration)
        values = size.point
        torch.set_num_threads(1)  # small tensors: see the Moshi face
        torch.manual_seed(request.seed)
        progress("loading", 0.0)
        t0 = time.perf_counter()
        try:
            models = build_models(
                size,
                files.files if files is not None else None,
                device,
                request.seed,
                lm_kwargs=lm_kwargs(size, loaders._lm_kwargs),
                load_lm=load_lm,
            )
        except CheckpointError as error:
            setting = "device" if "GPU memory" in str(error) else "checkpoint"
            raise FamilyError(str(error), setting) from None
        build_s = time.perf_counter() - t0
        progress("loading", 0.9)
        rate = declaration.clock_rate("sample", values)
        spf = values["samples_per_frame"]
        lm = models.lm
        width = max(lm.delays) + 3
        voice = resolve_voice(
            request.voice,
            files,
            seed=request.seed,
            rate=round(rate),
            spf=spf,
            dim=lm.dim,
            cache_shape=(1, lm.num_codebooks, width),
        )
        role = resolve_role(request.role, models.vocab.tokenizer, lm.text_card)
        prompt = PersonaPlexPrompt(
            voice,
            role,
            pad_text=values["prompt_pad_text"],
            silence=values["prompt_silence_frames"],
        )
        replay = ReplayEngine(device)
        sdpa = declaration.operators["lm_step"].kernels.get("sdpa", "default")
        stream = MoshiStream(
            models.mimi,
            LMGen(lm),
            replay=replay,
            arm=request.arm,
            samples_per_frame=spf,
            sdpa=sdpa if device.type == "cuda" else "default",
            rings=ring_shapes(declaration, values),
            ops=PersonaPlexOps,
            prompt=prompt,
            name="personaplex",
        )
        check_regions(stream, declaration, values)
        progress("loading", 1.0)
        warmup = warm_up(stream, replay, seed=request.seed, report=progress)
        warmup["build_s"] = round(build_s, 3)
        torch.manual_seed(request.seed)  # the conversation's draws do not depend on the warm-up
        t0 = time.perf_counter()
        stream.reset()  # the prompt phase, under the conversation's generator
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        warmup["prompt_s"] = round(time.perf_counter() - t0, 3)
        warmup["prompt_steps"] = stream.frames
        model = MoshiPeriods(stream, models.vocab, period_s=spf / rate, rate=round(rate))
        weights = "checkpoint" if files is not None else "seeded random weights"
        return LoadedModel(
            model=model,
            replay=replay,
            title=f"PersonaPlex ({size.name}, {weights}), voice {voice.name}, role {role.name}",
            declaration=declaration.name,
            weights_synthetic=files is None,
            stages=("encode", "lm", "decode", "frame"),
            warmup=warmup,
            facts={
                "model_size": size.name,
                "voice": voice.name,
                "role": role.name,
                "role_text": role.text,
                "role_tokens": len(role.tokens),
                "temporal_sdpa": stream.ops.sdpa,
                "rings": {k: sorted(v) for k, v in stream.ring_capacities().items()},
                "mimi_conv_values": stream.conv_values(),
                "clock_followers": stream.clock_followers,
            },
            has_text=True,
        )

    def _files(self, request: ModelRequest) -> PersonaPlexFiles | None:
        from adapters.personaplex.config import check_folder

        if request.checkpoint is None:
            return None
        try:
            return check_folder(request.checkpoint)
        except CheckpointError as error:
            fix = (
                "download it again"
                if isinstance(error, DamagedFile)
                else "choose a download of nvidia/personaplex-7b-v1"
            )
            raise FamilyError(f"{error}: {fix}", "checkpoint") from None


PERSONAPLEX = PersonaPlexFamily()

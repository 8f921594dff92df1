"""Build the basic family's cascade: load its three models once, reporting progress.

Loading takes ~25 s on two idle cores, nearly all of it the language model (transformers
dequantizes its GGUF file to float32, and the 4-bit blocks are recovered from that): do it once
per session, never per turn.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import torch

from adapters.basic.cascade import TAIL_S, BasicCascade
from adapters.basic.folders import BasicModels
from adapters.basic.shipped import check_installed

__all__ = ["load_basic"]

Progress = Callable[[str, float], None]
SHIPPED = BasicModels()  # the wheels' models


def load_basic(
    period_s: float,
    progress: Progress | None = None,
    threads: int | None = None,
    torch_threads: int = 1,
    realtime: bool = True,
    device: str = "cpu",
    tail_s: float = TAIL_S,
    models: BasicModels = SHIPPED,
) -> BasicCascade:
    """The cascade with Whisper base, SmolLM2-135M-Instruct and Piper's joe voice, or the
    larger recognizer and reply model of ``models`` (:func:`adapters.basic.folders.find_models`).

    ``progress(stage, fraction)`` hears ``("loading", 0..1)``. ``threads``: CTranslate2's CPU
    threads for recognition (default: the cores, at most 4); the voice uses onnxruntime's pool.
    ``realtime``: see :class:`BasicCascade` (False: a simulated clock, steps wait for answers).
    ``device``: where the recognizer and the reply model run ("cpu" or "cuda[:N]"); the voice
    stays on the CPU (onnxruntime's CPU build; it is 0.05x real time there). ``tail_s``: the
    input the cut keeps after the user's voice stops (:class:`BasicCascade`).
    ``torch_threads``: the process's torch intra-op threads, which the reply model runs on; set
    here because it is process-wide. One, as app/session.py uses on the CPU: on a busy two-core
    machine two threads made a reply 6-25x slower than one (barrier waits; 12-50 s against
    1.9-5.9 s for two sentences). Every shipped file comes from a wheel, by its local path.
    Raises ``RuntimeError`` (one line) when a package is missing.
    """
    report = progress or (lambda stage, fraction: None)
    check_installed()
    from adapters.basic.hearing import Recognizer
    from adapters.basic.reply import Replier
    from adapters.basic.voice import Voice

    torch.set_num_threads(torch_threads)
    report("loading", 0.0)
    recognizer = Recognizer(threads or min(4, os.cpu_count() or 1), device, folder=models.hearing)
    report("loading", 0.1)
    voice = Voice()
    report("loading", 0.2)
    replier = Replier(device=device, folder=models.reply)
    report("loading", 0.9)
    recognizer.transcribe(np.zeros(recognizer.rate, dtype=np.float32))  # first calls are slow
    voice.speak("Hello.")
    replier.warm_up()
    report("loading", 1.0)
    return BasicCascade(
        recognizer, replier, voice, period_s=period_s, realtime=realtime, tail_s=tail_s
    )

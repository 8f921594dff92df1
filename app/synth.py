"""``duplexcadence synth``: stream speech tokens through Token2Wav under an arm, headless.

One native period is one second: a 28-token window (25 new + 3 lookahead) through the flow, then
the vocoder, both under the arm; a final call with ``last_chunk=True`` flushes the lookahead. Each
period is timed, its replay counters (flow and vocoder operators) and memory recorded, and
appended to a JSONL trace flushed every period; at the end the trace is exported to a
Perfetto/Chrome JSON and the audio written as a 24 kHz WAV. Without ``--checkpoint`` the weights
are seeded random: the audio is not speech, it proves the pipeline and its cadence.

The voice is a seeded random prompt of ``--voice-frames P`` frames, or the voice of a recording
(``--prompt-wav F``, prepared as the vendor does by :mod:`adapters.token2wav.prompt` with the
checkpoint's speech tokenizer and speaker model; its length sets P).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from adapters.token2wav.binding import DECLARATIONS, call_classes
from adapters.token2wav.checkpoint import CheckpointError, load_token2wav
from adapters.token2wav.prompt import (
    SPEAKER_FILE,
    TOKENIZER_FILE,
    PromptError,
    VoicePrompt,
    check_prompt_wav,
    random_voice,
    voice_from_wav,
)
from adapters.token2wav.speech import SpeechStream
from adapters.token2wav.stream import FlowStream
from app.periods import write_wav
from app.progress import PeriodBar
from engine.arms import Arm
from engine.metrics import Metrics
from engine.replay import ReplayEngine
from engine.trace import TraceWriter, check_trace_path, session_metadata
from engine.trace_export import export_perfetto

SAMPLE_RATE = 24_000
STRIDE, LOOKAHEAD, VOCAB = 25, 3, 6561


@dataclass(frozen=True)
class SynthRequest:
    """What one ``synth`` run does; validated by :func:`check_request` before any work.

    Exactly one of ``voice_frames`` (a seeded random voice) and ``prompt_wav`` (a recording;
    needs ``checkpoint``) names the voice.
    """

    voice_frames: int | None
    seconds: int
    arm: Arm
    wav: Path
    trace: Path | None
    checkpoint: Path | None = None
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    seed: int = 0
    declaration: str = "minicpmo45"
    prompt_wav: Path | None = None


def check_request(req: SynthRequest) -> None:
    """Fail before loading anything, with the fix in the message."""
    _check_voice(req)
    if req.seconds < 1:
        raise ValueError(f"--seconds {req.seconds}: synthesize at least one second")
    if req.wav.suffix.lower() != ".wav" or not req.wav.parent.is_dir():
        raise ValueError(f"--wav {req.wav}: give a .wav path in an existing folder")
    if req.trace is not None:
        if req.trace.suffix.lower() != ".json":
            raise ValueError(f"--trace {req.trace}: give a .json path (Perfetto/Chrome trace)")
        check_trace_path(req.trace.with_suffix(".jsonl"), overwrite=True)
    if req.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device here; pass --device cpu")


def _check_voice(req: SynthRequest) -> None:
    if (req.voice_frames is None) == (req.prompt_wav is None):
        raise ValueError("give one voice: --voice-frames P (random) or --prompt-wav F (recording)")
    if req.prompt_wav is not None:
        if req.checkpoint is None:
            raise PromptError(
                f"--prompt-wav needs --checkpoint DIR: the Token2Wav folder whose {TOKENIZER_FILE} "
                f"and {SPEAKER_FILE} turn the recording into a voice"
            )
        check_prompt_wav(req.prompt_wav)
        return
    assert req.voice_frames is not None, "a request names --voice-frames or --prompt-wav"
    if req.voice_frames < 2 * LOOKAHEAD or req.voice_frames % 2:
        raise ValueError(
            f"--voice-frames {req.voice_frames}: give an even number of prompt mel frames "
            f">= {2 * LOOKAHEAD} (two per prompt token; the default voice has 302)"
        )


def load_voice(req: SynthRequest) -> VoicePrompt:
    """The request's voice on its device: the recording's (vendor preparation) or a random one."""
    if req.prompt_wav is not None:
        assert req.checkpoint is not None, "check_request lets --prompt-wav through only with it"
        return voice_from_wav(req.prompt_wav, req.checkpoint, req.device)
    assert req.voice_frames is not None, "a request names --voice-frames or --prompt-wav"
    return random_voice(req.voice_frames, req.seed, req.device)


def synthesize(req: SynthRequest, progress: bool = True) -> dict[str, float]:
    """Run the stream; returns a summary (seconds of audio, mean and max period time)."""
    check_request(req)
    voice = load_voice(req)  # before the flow: a bad prompt fails in a second, not after loading
    flow, hift = load_token2wav(
        req.checkpoint, seed=req.seed, device=req.device, envelope=not req.arm.state_rule
    )
    engine = ReplayEngine(req.device, enabled=req.arm.replay)
    classes = call_classes(req.declaration, voice.frames)
    flow_stream = FlowStream(
        flow, voice.tokens, voice.mel, voice.spk, arm=req.arm, engine=engine, classes=classes
    )
    stream = SpeechStream(flow_stream, hift, engine)
    metrics = Metrics(1.0, device=req.device, arm=str(req.arm))
    writer = _writer(req, voice.frames)
    pcm: list[np.ndarray] = []
    worst = total = 0.0
    tokens = _tokens(req.seconds, req.seed, req.device)
    calls = [
        (tokens[:, i * STRIDE : i * STRIDE + STRIDE + LOOKAHEAD], False) for i in range(req.seconds)
    ] + [(tokens[:, req.seconds * STRIDE :], True)]
    bar = PeriodBar("synth", len(calls)) if progress else None
    try:
        for window, last in calls:
            metrics.begin_period(replay=engine.snapshot())
            with torch.no_grad(), metrics.span("synthesis"):
                pcm.append(stream.push(window, last_chunk=last).squeeze(0).cpu().numpy())
            record = metrics.end_period(replay=engine.snapshot(), events=engine.drain_events())
            worst, total = max(worst, record.processing_s), total + record.processing_s
            if writer is not None:
                writer.write(record)
            if bar is not None:
                bar.update(f"last {record.processing_s * 1e3:.0f} ms")
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
    write_wav(req.wav, np.concatenate(pcm), SAMPLE_RATE)
    if req.trace is not None:
        export_perfetto(req.trace.with_suffix(".jsonl"), req.trace)
    audio_s = sum(len(p) for p in pcm) / SAMPLE_RATE
    return {"audio_s": audio_s, "mean_period_s": total / len(calls), "max_period_s": worst}


def _tokens(seconds: int, seed: int, device: str) -> Tensor:
    g = torch.Generator().manual_seed(seed + 2)
    count = seconds * STRIDE + LOOKAHEAD
    return torch.randint(0, VOCAB, (1, count), generator=g, dtype=torch.int32).to(device)


def _writer(req: SynthRequest, voice_frames: int) -> TraceWriter | None:
    if req.trace is None:
        return None
    meta = session_metadata(
        declaration=DECLARATIONS.get(req.declaration, req.declaration),
        arm=str(req.arm),
        device=req.device,
        settings={
            "voice_frames": voice_frames,
            "prompt_wav": str(req.prompt_wav) if req.prompt_wav else None,
            "seconds": req.seconds,
            "seed": req.seed,
            "checkpoint": str(req.checkpoint) if req.checkpoint else None,
            "weights": "checkpoint" if req.checkpoint else "seeded random (not speech)",
        },
    )
    return TraceWriter(req.trace.with_suffix(".jsonl"), meta, overwrite=True)


def load_error(exc: Exception) -> str:
    """The one-line message ``synth`` prints for a request it cannot serve."""
    kind = "request"
    if isinstance(exc, CheckpointError):
        kind = "checkpoint"
    elif isinstance(exc, PromptError):
        kind = "voice prompt"
    return f"duplexcadence synth: bad {kind}: {exc}"

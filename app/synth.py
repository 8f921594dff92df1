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

from adapters.face import FamilyError, ModelRequest
from adapters.token2wav.family import LYCHEEFD, SYNTHETIC, Token2WavFamily
from app.periods import write_wav
from app.progress import PeriodBar
from engine.arms import Arm
from engine.metrics import Metrics
from engine.trace import TraceWriter, check_trace_path, session_metadata
from engine.trace_export import export_perfetto

FAMILIES: dict[str, Token2WavFamily] = {f.key: f for f in (SYNTHETIC, LYCHEEFD)}


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
    family: str = "synthetic"
    prompt_wav: Path | None = None

    def model_request(self) -> ModelRequest:
        """The decoder's load request (the full-size model; the envelope only where it runs)."""
        return ModelRequest(
            device=self.device,
            model_size="full",
            checkpoint=self.checkpoint,
            voice=self.prompt_wav,
            voice_frames=self.voice_frames or 0,
            arm=self.arm,
            seed=self.seed,
            envelope=not self.arm.state_rule,
        )


def check_request(req: SynthRequest) -> None:
    """Fail before loading anything, with the fix in the message."""
    if req.family not in FAMILIES:
        raise ValueError(f"--family {req.family}: expected one of {', '.join(FAMILIES)}")
    if (req.voice_frames is None) == (req.prompt_wav is None):
        raise ValueError("give one voice: --voice-frames P (random) or --prompt-wav F (recording)")
    if req.prompt_wav is not None and req.checkpoint is None:
        raise FamilyError(
            "--prompt-wav needs --checkpoint DIR: the Token2Wav folder whose speech tokenizer "
            "and speaker model turn the recording into a voice",
            "voice",
        )
    if req.voice_frames is not None and (req.voice_frames < 6 or req.voice_frames % 2):
        raise ValueError(
            f"--voice-frames {req.voice_frames}: give an even number of prompt mel frames "
            ">= 6 (two per prompt token; the default voice has 302)"
        )
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
    FAMILIES[req.family].check(req.model_request())


def synthesize(req: SynthRequest, progress: bool = True) -> dict[str, float]:
    """Run the stream; returns a summary (seconds of audio, mean and max period time)."""
    check_request(req)
    model = FAMILIES[req.family].load_speech(req.model_request(), lambda stage, fraction: None)
    stream, engine, windower = model.speech, model.engine, model.windower
    metrics = Metrics(1.0, device=req.device, arm=str(req.arm))
    writer = _writer(req, model.voice.frames, model.declaration.name)
    pcm: list[np.ndarray] = []
    worst = total = 0.0
    stride, lookahead = windower.stride, windower.lookahead
    tokens = _tokens(req.seconds, stride, lookahead, model.vocab, req.seed, req.device)
    calls = [
        (tokens[:, i * stride : i * stride + stride + lookahead], False) for i in range(req.seconds)
    ] + [(tokens[:, req.seconds * stride :], True)]
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
    write_wav(req.wav, np.concatenate(pcm), model.output_rate)
    if req.trace is not None:
        export_perfetto(req.trace.with_suffix(".jsonl"), req.trace)
    audio_s = sum(len(p) for p in pcm) / model.output_rate
    return {"audio_s": audio_s, "mean_period_s": total / len(calls), "max_period_s": worst}


def _tokens(
    seconds: int, stride: int, lookahead: int, vocab: int, seed: int, device: str
) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 2)
    count = seconds * stride + lookahead
    return torch.randint(0, vocab, (1, count), generator=g, dtype=torch.int32).to(device)


def _writer(req: SynthRequest, voice_frames: int, declaration: str) -> TraceWriter | None:
    if req.trace is None:
        return None
    meta = session_metadata(
        declaration=declaration,
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


_KINDS = {"checkpoint": "checkpoint", "voice": "voice prompt"}


def load_error(exc: Exception) -> str:
    """The one-line message ``synth`` prints for a request it cannot serve."""
    setting = exc.setting if isinstance(exc, FamilyError) else None
    return f"duplexcadence synth: bad {_KINDS.get(setting or '', 'request')}: {exc}"

"""``duplexcadence synth``: stream speech tokens through Token2Wav under an arm, headless.

One native period is one steady window's stride (MiniCPM-o: a 28-token window, 25 new + 3
lookahead, one second) through the flow, then the vocoder, both under the arm; a final call with
``last_chunk=True`` flushes the lookahead. Each period is timed, its replay counters (flow and
vocoder operators) and memory recorded, and appended to a JSONL trace flushed every period; at
the end the trace is exported to a Perfetto/Chrome JSON and the audio written as a WAV at the
decoder's output rate.
Without ``--checkpoint`` the weights are seeded random: the audio is not speech, it proves the
pipeline and its cadence.

The voice is a seeded random prompt of ``--voice-frames P`` frames, or the voice of a recording
(``--prompt-wav F``, prepared as the vendor does by :mod:`adapters.token2wav.prompt` with the
checkpoint's speech tokenizer and speaker model; its length sets P).

Outputs are checked before the models load (:func:`app.outputs.check_outputs`: an existing file
only with ``--force``, room on the disk, not another run's) and claimed for the run
(:func:`app.outputs.claim_outputs`: a second ``synth`` naming one is refused before it loads);
the WAV is written period by period and the tokens are drawn per call, so memory stays flat in
``--seconds``. A run that fails (the model produced NaN,
say) leaves earlier files of the same names as they were and exits non-zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from adapters.face import (
    FamilyError,
    ModelRequest,
    declared_voice_frames,
    has_speech_decoder,
    speech_decoder,
)
from adapters.registry import family, family_keys
from app.interrupts import interrupts_deferred
from app.outputs import OutputsError, check_outputs, claim_outputs, run_bytes
from app.periods import WavSink
from app.progress import PeriodBar
from engine.arms import Arm
from engine.metrics import Metrics
from engine.trace import TraceWriter, check_trace_path, session_metadata
from engine.trace_export import export_perfetto

# The families whose speech decoder runs alone: speech tokens in, speech out.
FAMILIES = tuple(key for key in family_keys() if has_speech_decoder(family(key)))


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
    force: bool = False  # replace existing outputs (when the run does not fail)

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
            f">= 6 (two per prompt token; the default voice has {declared_voice_frames()})"
        )
    if req.seconds < 1:
        raise ValueError(f"--seconds {req.seconds}: synthesize at least one second")
    if req.wav.suffix.lower() != ".wav" or not req.wav.parent.is_dir():
        raise ValueError(f"--wav {req.wav}: give a .wav path in an existing folder")
    if req.trace is not None:
        if req.trace.suffix.lower() != ".json":
            raise ValueError(f"--trace {req.trace}: give a .json path (Perfetto/Chrome trace)")
        check_trace_path(req.trace.with_suffix(".jsonl"), overwrite=True)
    inputs = [("--prompt-wav", req.prompt_wav)] if req.prompt_wav is not None else []
    try:
        check_outputs(
            _outputs(req),
            inputs=inputs,
            force=req.force,
            bytes_needed=run_bytes(req.seconds + 1, 1, req.trace is not None),
        )
    except OutputsError as error:
        raise ValueError(str(error)) from None
    if req.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device here; pass --device cpu")
    family(req.family).check(req.model_request())


def _outputs(req: SynthRequest) -> list[tuple[str, Path]]:
    """Every file the run writes, with the option that names it."""
    traces = [] if req.trace is None else [req.trace.with_suffix(".jsonl"), req.trace]
    return [("--wav", req.wav), *(("--trace", trace) for trace in traces)]


def synthesize(req: SynthRequest, progress: bool = True) -> dict[str, float]:
    """Run the stream; returns a summary (seconds of audio, mean and max period time)."""
    check_request(req)
    with claim_outputs(_outputs(req), force=req.force):  # a second run is refused before loading
        return _synthesize(req, progress)


def _synthesize(req: SynthRequest, progress: bool) -> dict[str, float]:
    model = speech_decoder(family(req.family), req.model_request(), lambda stage, fraction: None)
    stream, replay, windower = model.speech, model.replay, model.windower
    metrics = Metrics(model.binding.stride_s, device=req.device, arm=str(req.arm))
    worst = total = 0.0
    stride, lookahead = windower.stride, windower.lookahead
    tokens = _Tokens(model.vocab, req.seed, req.device)
    calls = req.seconds + 1  # one window per second, then the flush of the lookahead
    bar = PeriodBar("synth", calls) if progress else None
    wav: WavSink | None = None
    writer: TraceWriter | None = None
    failed = True
    try:
        wav = WavSink(req.wav, model.output_rate, overwrite=req.force)
        writer = _writer(req, model.voice.frames, model.declaration.name)
        window = tokens.take(stride + lookahead)
        for index in range(calls):
            last = index == req.seconds
            with interrupts_deferred():  # a second's audio and its trace line, or neither
                metrics.begin_period(replay=replay.snapshot())
                with torch.no_grad(), metrics.span("synthesis"):
                    pcm = stream.push(window, last_chunk=last).squeeze(0).cpu().numpy()
                wav.write(pcm)
                if wav.nonfinite:
                    raise SynthFailed(
                        f"the model produced {wav.nonfinite} NaN or infinite samples in second "
                        f"{index}: its weights are broken; nothing was kept"
                    )
                record = metrics.end_period(replay=replay.snapshot(), events=replay.drain_events())
                worst, total = max(worst, record.processing_s), total + record.processing_s
                if writer is not None:
                    writer.write(record)
            if bar is not None:
                bar.update(f"last {record.processing_s * 1e3:.0f} ms")
            held = window[:, stride:]  # the lookahead tokens open the next window
            more = index + 1 < req.seconds  # the flush (last) call takes the lookahead alone
            window = torch.cat([held, tokens.take(stride)], dim=1) if more else held
        failed = False
    except KeyboardInterrupt:
        failed = False  # an interrupted run keeps what it made
        raise
    finally:
        if bar is not None:
            bar.close()
        with interrupts_deferred():  # each file closed whole
            if failed:  # the trace is the evidence of what failed; the audio is no result
                if writer is not None:
                    writer.abort()
                if wav is not None:
                    wav.abort(discard=True)
            else:
                if writer is not None:
                    writer.close()
                if wav is not None:
                    wav.close()
    if req.trace is not None:
        export_perfetto(req.trace.with_suffix(".jsonl"), req.trace)
    assert wav is not None, "the loop ran"
    audio_s = wav.frames / model.output_rate
    return {"audio_s": audio_s, "mean_period_s": total / calls, "max_period_s": worst}


class SynthFailed(RuntimeError):
    """The synthesis ran but its result is not audio (non-finite samples)."""


class _Tokens:
    """Seeded random speech tokens drawn as the stream asks: memory flat in ``--seconds``."""

    def __init__(self, vocab: int, seed: int, device: str) -> None:
        self.vocab, self.device = vocab, device
        self.generator = torch.Generator().manual_seed(seed + 2)

    def take(self, count: int) -> torch.Tensor:
        drawn = torch.randint(
            0, self.vocab, (1, count), generator=self.generator, dtype=torch.int32
        )
        return drawn.to(self.device)


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

"""The flow's voice prompt: speech tokens, prompt mel and speaker x-vector, from a recording.

Follows minicpmo-utils 1.0.7 ``Token2wav._prepare_prompt`` step by step:

1. read the file (any rate libsndfile reads); 16 kHz: every channel resampled, the first kept;
   24 kHz: the channel mean, resampled (the vendor reads the file twice, this way each time);
2. speech tokens: Whisper log-mel (128 bins) -> ``speech_tokenizer_v2_25hz.onnx`` (25 Hz, 6561
   codes);
3. x-vector: Kaldi fbank (80 bins), minus its mean over time -> ``campplus.onnx`` -> ``(1, 192)``
   (raw: the flow normalises and projects it itself);
4. prompt mel: 80-bin log-mel at 24 kHz, then cut or padded (last frame repeated) to exactly two
   frames per token, as the flow's cache setup requires.

Both ONNX models run on onnxruntime's CPU provider with the options the vendor gives its speaker
model (all graph optimisations, one intra-op thread). One difference from the vendor: it runs
the tokenizer as torch weights converted from the same ONNX file (``s3tokenizer``), on CUDA;
onnxruntime is how CosyVoice2's own frontend runs it. The codes come from rounding a projection
(FSQ), so the two agree except where a value sits on a rounding boundary at float precision.

Prompt length: between :data:`MIN_PROMPT_S` and :func:`max_prompt_seconds`, the limits
:mod:`adapters.token2wav.voice_limits` reads from the declaration torch-free (the default voice:
6.016 s -> 151 tokens -> 302 frames). Frames per token, the vocabulary and the lookahead come from
the declaration too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from adapters.token2wav.config import CheckpointError
from adapters.token2wav.features import (
    MEL_BINS,
    MEL_RATE,
    kaldi_fbank,
    prompt_mel,
    resample,
    whisper_log_mel,
)
from adapters.token2wav.voice_limits import (
    MIN_PROMPT_S,
    TOKENIZER_RATE,
    PromptLimits,
    max_prompt_seconds,
    prompt_limits,
    tokens_for,
)

__all__ = [
    "MIN_PROMPT_S",
    "SPEAKER_FILE",
    "TOKENIZER_FILE",
    "PromptError",
    "PromptLimits",
    "VoicePrompt",
    "check_prompt_wav",
    "max_prompt_seconds",
    "prompt_limits",
    "random_voice",
    "voice_from_wav",
]

TOKENIZER_FILE, SPEAKER_FILE = "speech_tokenizer_v2_25hz.onnx", "campplus.onnx"
SPK_DIM = 192  # the x-vector's width (the speaker model's output)


class PromptError(ValueError):
    """A voice prompt recording we cannot use, or a missing runtime; the message names the fix."""


@dataclass(frozen=True)
class VoicePrompt:
    """A voice: tokens ``(1, n)`` int32, mel ``(1, 2n, 80)`` float32, x-vector ``(1, 192)``."""

    tokens: Tensor
    mel: Tensor
    spk: Tensor

    @property
    def frames(self) -> int:
        """P: the prompt's mel frames, two per token; part of every replay signature."""
        return int(self.mel.shape[1])


def random_voice(frames: int, seed: int, device: str, family: str = "minicpmo45") -> VoicePrompt:
    """A seeded random voice of ``frames`` (even) mel frames: exercises the pipeline, not speech.

    Draws tokens, mel and x-vector in that order from ``manual_seed(seed + 1)`` (the values
    ``duplexcadence synth --voice-frames`` has always used), never from the global generator.
    """
    g = torch.Generator().manual_seed(seed + 1)
    limits = prompt_limits(family)
    count = frames // limits.frames_per_token
    tokens = torch.randint(0, limits.vocabulary, (1, count), generator=g, dtype=torch.int32)
    mel = torch.randn(1, frames, MEL_BINS, generator=g)
    spk = torch.randn(1, SPK_DIM, generator=g)
    return VoicePrompt(tokens.to(device), mel.to(device), spk.to(device))


def check_prompt_wav(wav: Path, family: str = "minicpmo45") -> float:
    """Fail early, before any model loads, on a recording we cannot use; returns its seconds.

    Reads only the header: the file must exist, be a sound file libsndfile reads, and last
    between :data:`MIN_PROMPT_S` and the length whose tokens fill ``family``'s envelope.
    """
    import soundfile

    if not wav.is_file():
        raise PromptError(f"voice prompt {wav} does not exist: give a WAV recording of the voice")
    try:
        info = soundfile.info(str(wav))
    except RuntimeError as error:  # soundfile's errors (LibsndfileError) are RuntimeErrors
        raise PromptError(
            f"voice prompt {wav} is not a readable sound file ({error}); give a WAV (or FLAC/OGG) "
            "recording, e.g. convert it with `ffmpeg -i IN -ar 24000 -ac 1 OUT.wav`"
        ) from error
    seconds = float(info.frames / info.samplerate)
    if seconds < MIN_PROMPT_S:
        raise PromptError(
            f"voice prompt {wav} lasts {seconds:.2f} s; record at least {MIN_PROMPT_S:.0f} s of "
            "the voice (the default voice is 6 s)"
        )
    limits = prompt_limits(family)
    samples = _samples_at(info.frames, info.samplerate, TOKENIZER_RATE)
    frames = limits.frames_per_token * tokens_for(samples)
    if frames > limits.max_frames:
        raise PromptError(
            f"voice prompt {wav} lasts {seconds:.2f} s, {frames} mel frames; cut it to at most "
            f"{max_prompt_seconds(family):.2f} s ({limits.max_frames} frames: the stock cache "
            f"envelope holds {limits.envelope_frames} = prompt + {limits.retained} retained + "
            f"{limits.call_frames} per call)"
        )
    return seconds


def voice_from_wav(
    wav: Path, checkpoint: Path, device: str, family: str = "minicpmo45"
) -> VoicePrompt:
    """The voice of the recording ``wav``, with the checkpoint folder's tokenizer and speaker model.

    ``checkpoint`` must hold :data:`TOKENIZER_FILE` and :data:`SPEAKER_FILE` (the Token2Wav
    folder of MiniCPM-o 4.5 or Step-Audio-2-mini). Raises :class:`PromptError` for a recording
    we cannot use or a missing onnxruntime, :class:`CheckpointError` for a missing or
    unexpected model file.
    """
    wav, checkpoint = Path(wav), Path(checkpoint)
    check_prompt_wav(wav, family)
    limits = prompt_limits(family)
    tokenizer, speaker = (_model_file(checkpoint, name) for name in (TOKENIZER_FILE, SPEAKER_FILE))
    channels, rate = _read(wav)
    audio16 = resample(channels, rate, TOKENIZER_RATE)[0]
    tokens = speech_tokens(
        _session(tokenizer), whisper_log_mel(audio16), tokenizer, limits.vocabulary
    )
    fbank = kaldi_fbank(audio16)
    spk = speaker_embedding(_session(speaker), fbank - fbank.mean(dim=0, keepdim=True), speaker)
    audio24 = resample(channels.mean(dim=0, keepdim=True), rate, MEL_RATE)
    frames = limits.frames_per_token * tokens.shape[1]
    mel = align_mel(prompt_mel(audio24).transpose(1, 2), frames)
    voice = VoicePrompt(tokens.to(device), mel.to(device), spk.to(device))
    if not limits.min_frames <= voice.frames <= limits.max_frames:
        raise PromptError(
            f"voice prompt {wav} gave {voice.frames} mel frames; keep it between "
            f"{MIN_PROMPT_S:.0f} s and {max_prompt_seconds(family):.2f} s"
        )
    return voice


def align_mel(mel: Tensor, target: int) -> Tensor:
    """``mel (1, F, 80)`` cut or padded to exactly ``target`` frames (frames per token × tokens).

    The vendor's ``F.pad(mel, (0, 0, 0, 2n - F), mode="replicate")``: the last frame repeated
    when short (the usual case: a few frames), the tail dropped when long.
    """
    if mel.shape[1] >= target:
        return mel[:, :target].contiguous()
    tail = mel[:, -1:].expand(-1, target - mel.shape[1], -1)
    return torch.cat([mel, tail], dim=1)


def speech_tokens(session: Any, log_mel: Tensor, path: Path, vocabulary: int) -> Tensor:
    """Run the speech tokenizer on ``log_mel (128, T)``; returns its codes ``(1, n)`` int32.

    Inputs as CosyVoice feeds them, by position: ``feats (1, 128, T)`` float32 and
    ``feats_length (1,)`` int32; output 0 holds the codes (int32 or int64).
    """
    inputs = session.get_inputs()
    if len(inputs) != 2:
        raise CheckpointError(
            f"{path} takes {len(inputs)} inputs; the speech tokenizer takes feats and "
            f"feats_length: is {TOKENIZER_FILE} the 25 Hz v2 tokenizer of this checkpoint?"
        )
    feats = log_mel.unsqueeze(0).contiguous().numpy()
    length = np.array([log_mel.shape[1]], dtype=np.int32)
    codes = np.asarray(session.run(None, {inputs[0].name: feats, inputs[1].name: length})[0])
    if codes.size == 0 or not np.issubdtype(codes.dtype, np.integer):
        raise CheckpointError(f"{path} returned {codes.dtype} {codes.shape}; expected codes")
    if codes.min() < 0 or codes.max() >= vocabulary:
        raise CheckpointError(
            f"{path} returned codes outside 0..{vocabulary - 1}: the flow's vocabulary is "
            f"{vocabulary}; "
            f"use the {TOKENIZER_FILE} shipped with this checkpoint"
        )
    return torch.from_numpy(codes.reshape(1, -1).astype(np.int32))


def speaker_embedding(session: Any, features: Tensor, path: Path) -> Tensor:
    """Run the speaker model on mean-normalised fbank ``(frames, 80)``; returns ``(1, 192)``."""
    name = session.get_inputs()[0].name
    out = np.asarray(session.run(None, {name: features.unsqueeze(0).contiguous().numpy()})[0])
    if out.shape != (1, SPK_DIM) or out.dtype != np.float32:
        raise CheckpointError(
            f"{path} returned {out.dtype} {out.shape}; the flow takes a float32 (1, {SPK_DIM}) "
            f"x-vector: use the {SPEAKER_FILE} shipped with this checkpoint"
        )
    return torch.from_numpy(out.copy())


def _model_file(checkpoint: Path, name: str) -> Path:
    path = checkpoint / name
    if not path.is_file():
        raise CheckpointError(
            f"Token2Wav folder {checkpoint} lacks {name}, which --prompt-wav needs (with "
            f"{TOKENIZER_FILE} and {SPEAKER_FILE}); copy it from the same checkpoint "
            "(MiniCPM-o-4_5/assets/token2wav/), or use a random voice (--voice-frames P)"
        )
    return path


def _session(path: Path) -> Any:
    """An onnxruntime CPU session with the vendor's options (deterministic, one thread)."""
    try:
        import onnxruntime
    except ImportError as error:
        raise PromptError(
            "--prompt-wav runs the checkpoint's ONNX models with onnxruntime, which is not "
            "installed: `pip install onnxruntime`"
        ) from error
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 1
    try:
        return onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as error:  # onnxruntime raises its own exception types per failure
        raise CheckpointError(
            f"{path} is not a loadable ONNX model ({error}); copy it again from the checkpoint"
        ) from error


def _read(wav: Path) -> tuple[Tensor, int]:
    """``(channels, time)`` float32 in [-1, 1] and the rate, as torchaudio.load returns them."""
    import soundfile

    try:
        data, rate = soundfile.read(str(wav), dtype="float32", always_2d=True)
    except RuntimeError as error:
        raise PromptError(
            f"voice prompt {wav} cannot be decoded ({error}); export it again as a WAV"
        ) from error
    return torch.from_numpy(np.ascontiguousarray(data.T)), int(rate)


def _samples_at(samples: int, rate: int, new_rate: int) -> int:
    """How many samples :func:`resample` makes of ``samples`` at ``rate``."""
    if rate == new_rate:
        return samples
    return int(torch.ceil(torch.as_tensor(new_rate * samples / rate)).long())

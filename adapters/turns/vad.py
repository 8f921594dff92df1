"""Streaming voice activity: silero-vad v6 on 16 kHz mono, one probability per 512-sample window.

The weights are the ones the installed ``silero-vad`` package ships and loads by default
(``silero_vad/data/silero_vad.jit``, the same model as its ONNX files). They run here in plain
torch (:func:`_forward_windows`), so the runtime needs neither torchaudio nor onnxruntime nor the
TorchScript interpreter: the archive is opened once, only to read its tensors. The package's
``silero_vad_16k.safetensors`` is *not* used: it holds different weights (probabilities up to
0.4 away from the JIT/ONNX model on real speech; upstream issue snakers4/silero-vad#768).

We never ``import silero_vad``: its ``model`` module calls ``torch.set_num_threads(1)`` at import
time, which would silently throttle every other CPU model in the process. The archive is found
with ``importlib.util.find_spec``, which does not run the package.

Streaming contract (the same as the package's own ``model(chunk, 16000)`` calls): each window
sees the last 64 samples of the previous one as context, the LSTM state carries across windows,
and samples that do not fill a window wait for the next :meth:`VoiceActivity.push`. So the
probabilities depend only on the audio, not on how it is cut into pushes (up to float rounding of
the batched convolutions, ~1e-5). Always on the CPU: ~0.1 ms of work per window.
"""

from __future__ import annotations

import importlib.util
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["CONTEXT", "RATE", "WINDOW", "VoiceActivity", "silero_jit_path"]

RATE = 16000  # the 16 kHz model (the archive's 8 kHz branch is not used)
WINDOW = 512  # samples per probability at 16 kHz (32 ms), fixed by the model
CONTEXT = 64  # samples of the previous window prepended to each window
_CUTOFF = 129  # STFT bins (256-point): real parts, then imaginary parts, in the basis
_HOP = 128

# Tensor names inside the JIT archive's 16 kHz model (``_model``), with the conv strides.
_CONVS = (("encoder.0", 1), ("encoder.1", 2), ("encoder.2", 2), ("encoder.3", 1))
_NAMES = (
    "stft.forward_basis_buffer",
    *(f"{name}.reparam_conv.{p}" for name, _ in _CONVS for p in ("weight", "bias")),
    *(f"decoder.rnn.{p}" for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")),
    "decoder.decoder.2.weight",
    "decoder.decoder.2.bias",
)


def silero_jit_path() -> Path:
    """The JIT archive inside the installed ``silero-vad`` package (the package is not imported)."""
    spec = importlib.util.find_spec("silero_vad")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / "data" / "silero_vad.jit"
        if path.is_file():
            return path
    raise RuntimeError(
        "silero-vad's weights (silero_vad/data/silero_vad.jit) are not installed: "
        "run scripts/setup.sh or `pip install 'silero-vad>=6.2,<7'`"
    )


@cache
def _weights() -> dict[str, Tensor]:
    """The 16 kHz model's tensors, read once per process (float32, CPU, no autograd)."""
    path = silero_jit_path()
    with warnings.catch_warnings():
        # torch 2.13 warns that torch.jit.load is deprecated; we only read the archive's tensors.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            archive = torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise RuntimeError(
                f"cannot read silero-vad's archive {path} with torch {torch.__version__} ({exc}): "
                "reinstall silero-vad (`pip install --force-reinstall 'silero-vad>=6.2,<7'`); if "
                "this torch no longer has torch.jit.load, use a torch that does (2.11-2.13 do)"
            ) from exc
    state = {k: v.detach().float().contiguous() for k, v in archive._model.state_dict().items()}
    missing = [name for name in _NAMES if name not in state]
    if missing:
        raise RuntimeError(
            f"silero-vad archive {path} lacks {missing}: this needs the v6 model "
            "(`pip install 'silero-vad>=6.2,<7'`)"
        )
    return {name: state[name] for name in _NAMES}


def _forward_windows(
    frames: Tensor, state: tuple[Tensor, Tensor] | None, w: dict[str, Tensor]
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """Probabilities of ``frames`` (n, CONTEXT + WINDOW) in order, carrying the LSTM ``state``.

    The convolutional front end has no memory beyond the context already in each row, so it runs
    on all rows at once; only the LSTM steps one window at a time.
    """
    x = F.pad(frames.unsqueeze(1), (0, CONTEXT), mode="reflect")
    spec = F.conv1d(x, w["stft.forward_basis_buffer"], stride=_HOP)
    x = torch.sqrt(spec[:, :_CUTOFF] ** 2 + spec[:, _CUTOFF:] ** 2)
    for name, stride in _CONVS:
        weight, bias = w[f"{name}.reparam_conv.weight"], w[f"{name}.reparam_conv.bias"]
        x = F.relu(F.conv1d(x, weight, bias, stride=stride, padding=1))
    features = x.squeeze(-1)  # (n, 128): one time step per window after the strided convs
    if state is None:
        zeros = features.new_zeros(1, features.shape[1])
        state = (zeros, zeros)
    h, c = state
    hidden = []
    for row in torch.split(features, 1):
        h, c = torch.lstm_cell(
            row,
            (h, c),
            w["decoder.rnn.weight_ih"],
            w["decoder.rnn.weight_hh"],
            w["decoder.rnn.bias_ih"],
            w["decoder.rnn.bias_hh"],
        )
        hidden.append(h)
    logits = F.linear(
        F.relu(torch.cat(hidden)),
        w["decoder.decoder.2.weight"][:, :, 0],
        w["decoder.decoder.2.bias"],
    )
    return torch.sigmoid(logits).squeeze(1), (h, c)


class VoiceActivity:
    """Streaming speech probabilities for 16 kHz mono float32 audio (silero-vad v6).

    ``push(samples)`` returns one probability per complete 512-sample window, oldest first
    (``len(samples) / 512`` of them, give or take the carried remainder: 31 or 32 per second).
    Not thread-safe: one engine thread pushes.
    """

    rate = RATE
    window = WINDOW

    def __init__(self) -> None:
        self._weights = _weights()
        self.reset()

    @property
    def window_s(self) -> float:
        """Seconds of audio per probability (0.032)."""
        return WINDOW / RATE

    def reset(self) -> None:
        """Forget the audio heard so far: zero context, fresh LSTM state, no carried samples."""
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)
        self._state: tuple[Tensor, Tensor] | None = None

    def push(self, samples: np.ndarray) -> np.ndarray:
        """Speech probabilities (float32, 0..1) of the complete windows these samples finish."""
        audio = np.asarray(samples, dtype=np.float32)
        if audio.ndim != 1:
            raise ValueError(
                f"VoiceActivity.push takes mono samples (1-D), got shape {audio.shape}: "
                "mix the channels down first (samples.mean(axis=1))"
            )
        audio = np.concatenate([self._pending, audio])
        n = audio.size // WINDOW
        self._pending = audio[n * WINDOW :].copy()
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        stream = np.concatenate([self._context, audio[: n * WINDOW]])
        self._context = stream[-CONTEXT:].copy()
        rows = np.lib.stride_tricks.sliding_window_view(stream, CONTEXT + WINDOW)[::WINDOW]
        with torch.inference_mode():
            frames = torch.from_numpy(rows.copy())  # the window view is read-only
            probs, self._state = _forward_windows(frames, self._state, self._weights)
        out: np.ndarray = probs.numpy().astype(np.float32)
        return out

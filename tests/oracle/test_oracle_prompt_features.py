"""Our voice-prompt features equal the code the vendor runs, bit for bit (``torch.equal``).

References, each the vendor's own code path, loaded without the libraries it cannot load here:

- Whisper log-mel: ``s3tokenizer/utils.py`` ``log_mel_spectrogram`` from the installed
  minicpmo-utils 1.0.7 (its module-level ``import torchaudio`` gets an empty stand-in; the
  function never touches it), and its ``mel_filters.npz`` (librosa's filters, as shipped).
- Prompt mel: ``stepaudio2/flashcosyvoice/utils/audio.py`` ``mel_spectrogram``. It builds its
  filters with ``librosa.filters.mel``; librosa (numba, scikit-learn) is no dependency here, so the
  stand-in hands it librosa's output when librosa is importable and ours otherwise — ours is
  checked separately: equal to the vendor's npz (16 kHz sets) and, for the 24 kHz set, to the
  sha256 of librosa 0.11.0's array (its mel code is the same as 0.9.0's, the vendor's pin).
- Kaldi fbank and resampling: torchaudio 2.11.0's own ``compliance/kaldi.py`` and
  ``transforms/_transforms.py`` (``Resample``), pure torch. torchaudio's native library does not
  load beside our torch, so the wheel is unpacked out of the import path
  (``pip install --no-deps --target .venv/oracle torchaudio==2.11.0``) and only these files are
  loaded, with stand-ins for the package and its extension flag.
- The whole preparation: the vendor's ``_prepare_prompt`` chain rebuilt from those references
  (reading the file with soundfile, as its ``torchaudio.load(backend="soundfile")`` does) against
  ``voice_from_wav``, both feeding the same stand-in ONNX models (``tests/test_token2wav_prompt``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import torch

from adapters.token2wav import features
from adapters.token2wav.prompt import SPEAKER_FILE, TOKENIZER_FILE, voice_from_wav
from tests.oracle.vendor import require_vendor

pytestmark = [pytest.mark.oracle, pytest.mark.usefixtures("one_thread")]

TORCHAUDIO_ORACLE = Path(sys.prefix) / "oracle" / "torchaudio"
TORCHAUDIO_INSTALL = "pip install --no-deps --target .venv/oracle torchaudio==2.11.0"
LIBROSA_MEL_24K_SHA256 = "6ae435f7b8b88c19e3ee46bb8a39b2091883d8371a268561923904bb9d0ec312"
"""sha256 of ``librosa.filters.mel(sr=24000, n_fft=1920, n_mels=80, fmin=0, fmax=8000)``'s bytes
(float32, C order), librosa 0.11.0 on numpy 2.4."""


# -- loading the references --------------------------------------------------------------------


@contextlib.contextmanager
def _stand_ins(modules: dict[str, types.ModuleType]) -> Iterator[None]:
    """Register ``modules`` while a reference file is imported, then drop them and everything
    imported under their names (real modules the file imports, e.g. scipy, stay loaded)."""
    roots = {name.split(".")[0] for name in modules}
    saved = {name: sys.modules[name] for name in list(sys.modules) if name.split(".")[0] in roots}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] in roots]:
            del sys.modules[name]
        sys.modules.update(saved)


def _package(name: str, path: Path | None = None, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    if path is not None:
        module.__path__ = [str(path)]
    module.__dict__.update(attrs)
    return module


def _load_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _installed(package: str) -> Path:
    require_vendor()
    loaded = sys.modules.get(package)
    if loaded is not None and loaded.__spec__ is None:  # vendor.py's bare package object
        return Path(next(iter(loaded.__path__)))
    spec = importlib.util.find_spec(package)  # locates without running the package __init__
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def s3tokenizer_utils() -> types.ModuleType:
    with _stand_ins({"torchaudio": _package("torchaudio")}):
        return _load_file("_oracle_s3tokenizer_utils", _installed("s3tokenizer") / "utils.py")


def _librosa_mel(**kwargs: Any) -> np.ndarray:
    try:
        import librosa
    except ImportError:
        return features.slaney_mel_filters(
            kwargs["sr"], kwargs["n_fft"], kwargs["n_mels"], kwargs["fmin"], kwargs["fmax"]
        )
    return np.asarray(librosa.filters.mel(**kwargs))


@functools.cache
def vendor_audio() -> types.ModuleType:
    filters = _package("librosa.filters", mel=_librosa_mel)
    librosa = _package("librosa", filters=filters)
    path = _installed("stepaudio2") / "flashcosyvoice" / "utils" / "audio.py"
    with _stand_ins({"librosa": librosa, "librosa.filters": filters}):
        return _load_file("_oracle_matcha_audio", path)


@functools.cache
def torchaudio_files() -> tuple[types.ModuleType, types.ModuleType]:
    """``(compliance.kaldi, transforms._transforms)`` of the unpacked torchaudio wheel."""
    if not (TORCHAUDIO_ORACLE / "compliance" / "kaldi.py").is_file():
        pytest.skip(f"the torchaudio oracle files are absent: `{TORCHAUDIO_INSTALL}`")
    root = TORCHAUDIO_ORACLE
    modules = {
        "torchaudio": _package("torchaudio", root),
        "torchaudio._extension": _package(
            "torchaudio._extension", _IS_TORCHAUDIO_EXT_AVAILABLE=False
        ),
        **{f"torchaudio.{sub}": _package(f"torchaudio.{sub}", root / sub) for sub in
           ("functional", "compliance", "transforms")},
    }  # fmt: skip
    with _stand_ins(modules):
        kaldi = importlib.import_module("torchaudio.compliance.kaldi")
        transforms = importlib.import_module("torchaudio.transforms._transforms")
    return kaldi, transforms


# -- signals -----------------------------------------------------------------------------------


def _signals(rate: int) -> dict[str, torch.Tensor]:
    """Noise, a harmonic glide, near-silence (the log floors) and an odd length, float32."""
    g = torch.Generator().manual_seed(rate)
    t = torch.arange(int(1.7 * rate), dtype=torch.float64) / rate
    phase = 2 * torch.pi * (150 * t + 40 * t**2)
    glide = torch.stack([torch.sin(k * phase) / k for k in range(1, 6)]).sum(0)
    return {
        "noise": 0.3 * torch.randn(int(2.3 * rate), generator=g),
        "glide": (0.25 * glide).float(),
        "quiet": 1e-6 * torch.randn(rate, generator=g),
        "odd": 0.1 * torch.randn(rate + 1237, generator=g),
    }


# -- filters -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n_mels", [80, 128])
def test_whisper_filters_equal_the_vendor_asset(n_mels: int) -> None:
    with np.load(_installed("s3tokenizer") / "assets" / "mel_filters.npz") as shipped:
        assert np.array_equal(
            features.slaney_mel_filters(16_000, 400, n_mels), shipped[f"mel_{n_mels}"]
        )


def test_prompt_mel_filters_equal_librosa_pinned() -> None:
    ours = features.slaney_mel_filters(24_000, 1920, 80, fmax=8000.0)
    assert ours.dtype == np.float32 and ours.shape == (80, 961)
    assert hashlib.sha256(ours.tobytes()).hexdigest() == LIBROSA_MEL_24K_SHA256


def test_prompt_mel_filters_equal_librosa_installed() -> None:
    librosa = pytest.importorskip("librosa", reason="librosa is optional (pinned hash above)")
    theirs = librosa.filters.mel(sr=24_000, n_fft=1920, n_mels=80, fmin=0, fmax=8000)
    assert np.array_equal(features.slaney_mel_filters(24_000, 1920, 80, fmax=8000.0), theirs)


# -- features ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["noise", "glide", "quiet", "odd"])
def test_whisper_log_mel_equals_s3tokenizer(name: str) -> None:
    audio = _signals(16_000)[name]
    theirs = s3tokenizer_utils().log_mel_spectrogram(audio)
    ours = features.whisper_log_mel(audio)
    assert ours.shape == (128, audio.numel() // 160) and torch.equal(ours, theirs)


@pytest.mark.parametrize("name", ["noise", "glide", "quiet", "odd"])
def test_prompt_mel_equals_matcha(name: str) -> None:
    audio = _signals(24_000)[name][None]
    theirs = vendor_audio().mel_spectrogram(audio)
    ours = features.prompt_mel(audio)
    assert ours.shape == (1, 80, audio.shape[1] // 480) and torch.equal(ours, theirs)


@pytest.mark.parametrize("name", ["noise", "glide", "quiet", "odd"])
def test_kaldi_fbank_equals_torchaudio(name: str) -> None:
    kaldi, _ = torchaudio_files()
    audio = _signals(16_000)[name]
    for clip in (audio, audio[:400], audio[:559]):  # one frame, and one short of two
        theirs = kaldi.fbank(clip[None], num_mel_bins=80, dither=0, sample_frequency=16000)
        assert torch.equal(features.kaldi_fbank(clip), theirs)


@pytest.mark.parametrize("orig", [8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000])
def test_resample_equals_torchaudio_transform(orig: int) -> None:
    _, transforms = torchaudio_files()
    g = torch.Generator().manual_seed(orig)
    for length in (orig, orig + 1, 3 * orig + 457):
        audio = 0.3 * torch.randn(2, length, generator=g)
        for new in (16_000, 24_000):
            theirs = transforms.Resample(orig, new)(audio)
            ours = features.resample(audio, orig, new)
            assert ours.shape == theirs.shape and torch.equal(ours, theirs), (length, new)


# -- the whole preparation ---------------------------------------------------------------------


def _vendor_prepare(wav: Path, folder: Path) -> tuple[torch.Tensor, ...]:
    """``Token2wav._prepare_prompt`` on the CPU, from the reference functions above."""
    from tests.test_token2wav_prompt import ort_session

    kaldi, transforms = torchaudio_files()
    s3 = s3tokenizer_utils()
    data, rate = soundfile.read(wav, dtype="float32", always_2d=True)
    audio = torch.from_numpy(data.T.copy())
    audio16 = transforms.Resample(rate, 16_000)(audio)[0]  # s3tokenizer.load_audio
    mels, mels_lens = s3.padding([s3.log_mel_spectrogram(audio16)])
    tokenizer = ort_session(folder / TOKENIZER_FILE)
    names = [i.name for i in tokenizer.get_inputs()]
    feeds = dict(zip(names, [mels.numpy(), mels_lens.numpy()], strict=True))
    tokens = torch.from_numpy(tokenizer.run(None, feeds)[0])
    spk_feat = kaldi.fbank(audio16.unsqueeze(0), num_mel_bins=80, dither=0, sample_frequency=16000)
    spk_feat = spk_feat - spk_feat.mean(dim=0, keepdim=True)
    speaker = ort_session(folder / SPEAKER_FILE)
    spk = torch.tensor(speaker.run(None, {speaker.get_inputs()[0].name: spk_feat[None].numpy()})[0])
    audio24 = transforms.Resample(rate, 24_000)(audio.mean(dim=0, keepdim=True))
    mel = vendor_audio().mel_spectrogram(audio24).transpose(1, 2).squeeze(0).unsqueeze(0)
    mel = torch.nn.functional.pad(mel, (0, 0, 0, tokens.shape[1] * 2 - mel.shape[1]), "replicate")
    return tokens, mel, spk


@pytest.mark.parametrize(("rate", "channels"), [(44_100, 2), (16_000, 1), (24_000, 1)])
def test_voice_from_wav_equals_the_vendor_chain(tmp_path: Path, rate: int, channels: int) -> None:
    from tests.test_token2wav_prompt import speaker_model, tokenizer_model, write_voice

    onnx = pytest.importorskip("onnx")
    onnx.save(tokenizer_model("int64"), tmp_path / TOKENIZER_FILE)
    onnx.save(speaker_model(), tmp_path / SPEAKER_FILE)
    wav = write_voice(tmp_path / "voice.wav", 2.2, rate=rate, channels=channels)
    tokens, mel, spk = _vendor_prepare(wav, tmp_path)
    voice = voice_from_wav(wav, tmp_path, "cpu")
    assert torch.equal(voice.tokens, tokens.to(torch.int32))
    assert torch.equal(voice.mel, mel) and torch.equal(voice.spk, spk)
    assert voice.frames == 2 * tokens.shape[1] == 110  # 2.2 s -> 220 frames -> 55 tokens

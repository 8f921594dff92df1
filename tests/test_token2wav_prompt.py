"""A voice-prompt recording becomes the flow's prompt: loaders on a checkpoint folder in the real
format, every error path with its fix, and the seeded random voice.

The one allowed fake boundary: the real ``speech_tokenizer_v2_25hz.onnx`` and ``campplus.onnx``
are not downloadable here, so the folder holds tiny ONNX models with the vendor's interface (input
and output names, dtypes, dynamic axes) written with the ``onnx`` package. They compute something
of the real shape: the tokenizer strides 2 × 2 over the log-mel with convolutions, projects to 8
dimensions and quantizes with the real FSQ (3 levels each, 3^8 = 6561 codes), and its codes change
if ``feats_length`` is wrong; the speaker model is a projection averaged over time. Everything
else (flow.yaml, flow.pt, hift_original.pt, the WAV) is real. The features themselves are
compared with the vendor's own code in ``tests/oracle/test_oracle_prompt_features.py``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import soundfile
import torch
from onnx import TensorProto, helper, numpy_helper

from adapters.token2wav.binding import bind_flow
from adapters.token2wav.config import CheckpointError
from adapters.token2wav.declared import flow_declaration
from adapters.token2wav.features import (
    kaldi_fbank,
    prompt_mel,
    resample,
    whisper_log_mel,
)
from adapters.token2wav.hift import build_hift
from adapters.token2wav.prompt import (
    SPEAKER_FILE,
    TOKENIZER_FILE,
    PromptError,
    align_mel,
    check_prompt_wav,
    max_prompt_seconds,
    prompt_limits,
    random_voice,
    voice_from_wav,
)
from tests.test_token2wav_checkpoint import SMALL, SMALL_YAML

pytestmark = pytest.mark.usefixtures("one_thread")
OPSET = 17
CODE_DTYPES = {"int32": TensorProto.INT32, "int64": TensorProto.INT64}


# -- the checkpoint folder ---------------------------------------------------------------------


def tokenizer_model(codes: str = "int32", channels: int = 16, seed: int = 0) -> onnx.ModelProto:
    """``feats (B, 128, T)`` float32, ``feats_length (B,)`` int32 -> ``indices (B, n)``."""
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int, scale: float) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("f4"), name)

    powers = (3.0 ** np.arange(8)).astype("f4")
    nodes = [
        helper.make_node("Conv", ["feats", "w1", "b1"], ["c1"], pads=[1, 1], strides=[2]),
        helper.make_node("Tanh", ["c1"], ["a1"]),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1], strides=[2]),
        helper.make_node("Transpose", ["c2"], ["h"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["h", "w3"], ["p"]),
        # (feats_length - T) * 100 added before the tanh: a wrong length saturates every code.
        helper.make_node("Shape", ["feats"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["frames"]),
        helper.make_node("Cast", ["frames"], ["frames_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["feats_length"], ["length_f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["length_f", "frames_f"], ["gap"]),
        helper.make_node("Mul", ["gap", "hundred"], ["gap100"]),
        helper.make_node("Unsqueeze", ["gap100", "axes12"], ["gap3"]),
        helper.make_node("Add", ["p", "gap3"], ["q"]),
        helper.make_node("Tanh", ["q"], ["t"]),  # FSQ: tanh * 0.999, round, shift to 0..2
        helper.make_node("Mul", ["t", "fsq_scale"], ["ts"]),
        helper.make_node("Round", ["ts"], ["r"]),
        helper.make_node("Add", ["r", "one"], ["digits"]),
        helper.make_node("MatMul", ["digits", "powers"], ["code_f"]),
        helper.make_node("Cast", ["code_f"], ["indices"], to=CODE_DTYPES[codes]),
    ]
    constants = [
        weight("w1", channels, 128, 3, scale=0.15),
        weight("b1", channels, scale=0.1),
        weight("w2", channels, channels, 3, scale=0.3),
        weight("b2", channels, scale=0.1),
        weight("w3", channels, 8, scale=1.0),
        numpy_helper.from_array(np.array(2, dtype="i8"), "two"),
        numpy_helper.from_array(np.array(100.0, dtype="f4"), "hundred"),
        numpy_helper.from_array(np.array([1, 2], dtype="i8"), "axes12"),
        numpy_helper.from_array(np.array(0.999, dtype="f4"), "fsq_scale"),
        numpy_helper.from_array(np.array(1.0, dtype="f4"), "one"),
        numpy_helper.from_array(powers, "powers"),
    ]
    graph = helper.make_graph(
        nodes,
        "speech_tokenizer_v2_25hz_stand_in",
        [
            helper.make_tensor_value_info("feats", TensorProto.FLOAT, ["batch", 128, "frames"]),
            helper.make_tensor_value_info("feats_length", TensorProto.INT32, ["batch"]),
        ],
        [helper.make_tensor_value_info("indices", CODE_DTYPES[codes], ["batch", "tokens"])],
        constants,
    )
    return _model(graph)


def speaker_model(width: int = 192, seed: int = 1) -> onnx.ModelProto:
    """``input (B, T, 80)`` float32 -> ``output (B, width)`` float32: tanh projection, time mean."""
    w = (np.random.default_rng(seed).standard_normal((80, width)) * 0.2).astype("f4")
    nodes = [
        helper.make_node("MatMul", ["input", "w"], ["p"]),
        helper.make_node("Tanh", ["p"], ["t"]),
        helper.make_node("ReduceMean", ["t"], ["output"], axes=[1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "campplus_stand_in",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "frames", 80])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", width])],
        [numpy_helper.from_array(w, "w")],
    )
    return _model(graph)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # what onnxruntime releases since 1.10 read
    onnx.checker.check_model(model, full_check=True)
    return model


def write_checkpoint(folder: Path, codes: str = "int32") -> Path:
    """A Token2Wav folder: the small flow (flow.yaml + flow.pt), hift_original.pt, both models."""
    from adapters.token2wav.checkpoint import load_token2wav

    folder.mkdir(parents=True, exist_ok=True)
    flow, _ = load_token2wav(None, seed=4, config=SMALL)
    (folder / "flow.yaml").write_text(SMALL_YAML)
    torch.save(flow.state_dict(), folder / "flow.pt")
    hift = {f"generator.{key}": value for key, value in build_hift(5).state_dict().items()}
    torch.save(hift, folder / "hift_original.pt")
    onnx.save(tokenizer_model(codes), folder / TOKENIZER_FILE)
    onnx.save(speaker_model(), folder / SPEAKER_FILE)
    return folder


def write_voice(path: Path, seconds: float, rate: int = 22_050, channels: int = 2) -> Path:
    """A voiced-sounding 16-bit recording: a gliding harmonic tone in noise, seeded."""
    t = np.arange(int(seconds * rate)) / rate
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    tone = np.sum([np.sin(k * phase) / k for k in range(1, 8)], axis=0)
    noise = np.random.default_rng(3).standard_normal((len(t), channels)) * 0.02
    audio = 0.2 * tone[:, None] * np.linspace(1.0, 0.6, channels)[None] + noise
    soundfile.write(path, audio.astype("f4"), rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("token2wav"))


@pytest.fixture(scope="module")
def voice_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_voice(tmp_path_factory.mktemp("voice") / "voice.wav", 1.3)


# -- the prepared voice ------------------------------------------------------------------------


def ort_session(model: Path | bytes) -> Any:
    """A session with the options the vendor gives campplus (all optimisations, one thread)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 1
    source = str(model) if isinstance(model, Path) else model
    return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def _sessions(folder: Path) -> tuple[Any, Any]:
    return ort_session(folder / TOKENIZER_FILE), ort_session(folder / SPEAKER_FILE)


@pytest.mark.parametrize("codes", ["int32", "int64"])
def test_voice_from_wav_feeds_each_model_the_vendor_features(
    tmp_path: Path, voice_wav: Path, codes: str
) -> None:
    folder = tmp_path / "t2w"
    folder.mkdir()
    onnx.save(tokenizer_model(codes), folder / TOKENIZER_FILE)
    onnx.save(speaker_model(), folder / SPEAKER_FILE)
    voice = voice_from_wav(voice_wav, folder, "cpu")

    # The vendor's chain by hand: channel 0 at 16 kHz for both models, the channel mean at 24 kHz.
    data, rate = soundfile.read(voice_wav, dtype="float32", always_2d=True)
    channels = torch.from_numpy(data.T.copy())
    audio16 = resample(channels, rate, 16_000)[0]
    mel128 = whisper_log_mel(audio16)
    tokenizer, speaker = _sessions(folder)
    feeds = {"feats": mel128[None].numpy(), "feats_length": np.array([mel128.shape[1]], "i4")}
    codes_expected = tokenizer.run(None, feeds)[0]
    fbank = kaldi_fbank(audio16)
    spk = speaker.run(None, {"input": (fbank - fbank.mean(0, keepdim=True))[None].numpy()})[0]
    mel = prompt_mel(resample(channels.mean(0, keepdim=True), rate, 24_000)).transpose(1, 2)

    n = math.ceil(math.ceil(mel128.shape[1] / 2) / 2)  # two stride-2 convolutions
    assert voice.tokens.shape == (1, n) and voice.tokens.dtype == torch.int32
    assert torch.equal(voice.tokens, torch.from_numpy(codes_expected.astype("i4")))
    assert len(set(voice.tokens[0].tolist())) > n // 3, "codes should vary over the recording"
    assert voice.frames == 2 * n and voice.mel.shape == (1, 2 * n, 80)
    assert voice.mel.dtype == torch.float32 and torch.equal(voice.mel, align_mel(mel, 2 * n))
    assert torch.equal(voice.spk, torch.from_numpy(spk)) and voice.spk.shape == (1, 192)


def test_a_wrong_feats_length_changes_the_stand_in_codes(voice_wav: Path) -> None:
    """The tokenizer stand-in would catch a wrong ``feats_length`` (checks the fake itself)."""
    data, rate = soundfile.read(voice_wav, dtype="float32", always_2d=True)
    mel128 = whisper_log_mel(resample(torch.from_numpy(data.T.copy()), rate, 16_000)[0])
    session = ort_session(tokenizer_model().SerializeToString())
    right = session.run(
        None, {"feats": mel128[None].numpy(), "feats_length": np.array([130], "i4")}
    )
    wrong = session.run(
        None, {"feats": mel128[None].numpy(), "feats_length": np.array([129], "i4")}
    )
    assert mel128.shape[1] == 130 and not np.array_equal(right[0], wrong[0])


@pytest.mark.parametrize("frames", [7, 10, 12])
def test_align_mel_is_the_vendors_replicate_pad(frames: int) -> None:
    mel = torch.randn(1, frames, 80, generator=torch.Generator().manual_seed(frames))
    vendor = torch.nn.functional.pad(mel, (0, 0, 0, 2 * 5 - frames), mode="replicate")
    assert torch.equal(align_mel(mel, 2 * 5), vendor)


def test_random_voice_keeps_the_synth_values_and_the_global_generator() -> None:
    before = torch.random.get_rng_state()
    voice = random_voice(20, seed=3, device="cpu")
    assert torch.equal(torch.random.get_rng_state(), before)
    g = torch.Generator().manual_seed(4)  # what app/synth.py drew before it moved here: seed + 1
    assert torch.equal(
        voice.tokens, torch.randint(0, 6561, (1, 10), generator=g, dtype=torch.int32)
    )
    assert torch.equal(voice.mel, torch.randn(1, 20, 80, generator=g))
    assert torch.equal(voice.spk, torch.randn(1, 192, generator=g))
    assert voice.frames == 20


# -- errors name the fix -----------------------------------------------------------------------


def test_missing_model_files_are_named(tmp_path: Path, voice_wav: Path) -> None:
    for present, missing in ((SPEAKER_FILE, TOKENIZER_FILE), (TOKENIZER_FILE, SPEAKER_FILE)):
        folder = tmp_path / missing
        folder.mkdir()
        model = speaker_model() if present == SPEAKER_FILE else tokenizer_model()
        onnx.save(model, folder / present)
        with pytest.raises(CheckpointError, match=f"lacks {missing}.*--voice-frames"):
            voice_from_wav(voice_wav, folder, "cpu")


def test_a_corrupt_or_foreign_model_is_a_checkpoint_error(tmp_path: Path, voice_wav: Path) -> None:
    folder = tmp_path / "t2w"
    folder.mkdir()
    (folder / TOKENIZER_FILE).write_bytes(b"not an onnx model")
    onnx.save(speaker_model(), folder / SPEAKER_FILE)
    with pytest.raises(CheckpointError, match="not a loadable ONNX model"):
        voice_from_wav(voice_wav, folder, "cpu")
    onnx.save(speaker_model(), folder / TOKENIZER_FILE)  # one input: not a tokenizer
    with pytest.raises(CheckpointError, match=r"takes 1 inputs.*feats_length"):
        voice_from_wav(voice_wav, folder, "cpu")
    onnx.save(tokenizer_model(), folder / TOKENIZER_FILE)
    onnx.save(speaker_model(width=80), folder / SPEAKER_FILE)
    with pytest.raises(CheckpointError, match=r"\(1, 80\).*float32 \(1, 192\) x-vector"):
        voice_from_wav(voice_wav, folder, "cpu")


def test_missing_onnxruntime_names_the_install(
    monkeypatch: pytest.MonkeyPatch, checkpoint: Path, voice_wav: Path
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with pytest.raises(PromptError, match="pip install onnxruntime"):
        voice_from_wav(voice_wav, checkpoint, "cpu")


def test_unusable_recordings_are_refused_with_the_fix(tmp_path: Path, checkpoint: Path) -> None:
    with pytest.raises(PromptError, match="does not exist"):
        voice_from_wav(tmp_path / "nowhere.wav", checkpoint, "cpu")
    (tmp_path / "notes.wav").write_text("not audio")
    with pytest.raises(PromptError, match=r"not a readable sound file.*ffmpeg"):
        voice_from_wav(tmp_path / "notes.wav", checkpoint, "cpu")
    short = write_voice(tmp_path / "short.wav", 0.5, rate=16_000, channels=1)
    with pytest.raises(PromptError, match=r"lasts 0.50 s; record at least 1 s"):
        voice_from_wav(short, checkpoint, "cpu")


def test_the_longest_prompt_fills_the_envelope_and_no_more(tmp_path: Path) -> None:
    """16.88 s at 16 kHz -> 1688 log-mel frames -> 422 tokens -> 844 = 1000 - 100 - 56 frames."""
    assert prompt_limits().max_frames == 844 and max_prompt_seconds() == pytest.approx(16.88)
    longest = int(max_prompt_seconds() * 16_000) + 159  # the last 10 ms frame is still partial
    path = tmp_path / "long.wav"
    soundfile.write(path, np.zeros(longest, "f4"), 16_000, subtype="PCM_16")
    assert check_prompt_wav(path) == pytest.approx(longest / 16_000)
    soundfile.write(path, np.zeros(longest + 1, "f4"), 16_000, subtype="PCM_16")
    with pytest.raises(PromptError, match=r"846 mel frames; cut it to at most 16.88 s"):
        check_prompt_wav(path)


@pytest.mark.parametrize("family", ["minicpmo45", "lycheefd"])
def test_the_torch_free_limits_agree_with_the_flows_binding(family: str) -> None:
    """voice_limits reads the plan without torch (the command line's help quotes it); what it
    adds to a prompt is what the flow's binding sizes the carry by."""
    limits = prompt_limits(family)
    binding = bind_flow(family, flow_declaration(family).values()["f_prompt"])
    assert limits.retained == binding.carry.prompt
    assert limits.retained + limits.call_frames == binding.capacity - binding.prompt_frames
    assert limits.frames_per_token == binding.frames_per_token
    assert limits.min_frames == binding.frames_per_token * binding.lookahead


@pytest.mark.parametrize("rate", [16_000, 44_100])
def test_the_default_voice_length_gives_302_frames(
    tmp_path: Path, checkpoint: Path, rate: int
) -> None:
    """FACTS.md: the default voice, 6.016 s, is 151 tokens, P = 302."""
    wav = write_voice(tmp_path / "default.wav", 6.016, rate=rate, channels=1)
    voice = voice_from_wav(wav, checkpoint, "cpu")
    assert voice.tokens.shape == (1, 151) and voice.frames == 302

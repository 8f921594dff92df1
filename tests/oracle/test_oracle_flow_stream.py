"""Our stock flow stream equals the vendor's streaming bit for bit, call after call.

Vendor side, as minicpmo-utils 1.0.7 streams: ``CausalMaskedDiffWithXvec.setup_cache`` on the
prompt tokens plus their first 3, ``inference_chunk`` per call, then ``Token2wav``'s own
``_trim_estimator_cache`` and ``_trim_conformer_cache`` (called on a light object holding just the
cache and the flow), and a turn reset to a clone of the prompt-only state (what MiniCPM-o does).
Our side: :class:`StockStream`. Same random weights (ours loaded into the vendor with
``strict=True``) and the same noise buffer (copied across: it is not in the checkpoint).
``torch.equal`` on every mel chunk and on every cache after trimming.

``stepaudio2/token2wav.py`` imports torchaudio, s3tokenizer, hyperpyyaml and librosa (through the
vocoder modules) at module level; the trims never call them, so the child process registers empty
stand-ins for those modules before importing it (a fake at an import boundary, nothing more).
The vendor import mutates process-wide ``torch._dynamo`` settings: comparisons run in their own
interpreter, started by the parent tests (``*_child`` tests run only there).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from adapters.token2wav.binding import bind_flow
from adapters.token2wav.checkpoint import build_flow, load_token2wav
from adapters.token2wav.config import CFMConfig, DiTConfig, EncoderConfig, FlowConfig
from adapters.token2wav.flow import CACHE_KEYS, CausalMaskedDiffWithXvec
from adapters.token2wav.stock import StockStream
from adapters.weights import randomize_
from tests.oracle.vendor import require_vendor, run_isolated, vendor_flow, vendor_token2wav

CHILD_ENV = "DUPLEXCADENCE_ORACLE_CHILD"
IN_CHILD = os.environ.get(CHILD_ENV) == "1"
child_only = pytest.mark.skipif(
    not IN_CHILD, reason="runs in its own interpreter, started by its parent test"
)

# (tokens incl. 3 lookahead, last_chunk): a flush-sized start, steady 28-token windows, flushes
# and a last chunk. Every turn starts with a reset to the prompt-only state; the CPU run's first
# turn is cut after 7 calls (a barge-in), so 7 + 10 + 13 = 30 calls.
TURN = [
    (8, False),
    (28, False),
    (28, False),
    (28, False),
    (11, False),
    (9, False),
    (28, False),
    (14, False),
    (10, False),
    (8, True),
]
LONG_TURN = [
    (12, False),
    (28, False),
    (9, False),
    (28, False),
    (8, False),
    (28, False),
    (10, False),
    (13, False),
    (28, False),
    (9, False),
    (28, False),
    (8, True),
    (20, True),
]


def _stream(
    device: str, prompt_tokens: int, n_timesteps: int, turns: list[list[tuple[int, bool]]]
) -> None:
    require_vendor()
    ours_flow, _ = load_token2wav(None, seed=7, device=device)
    theirs_flow = vendor_flow(ours_flow)
    token2wav = vendor_token2wav()
    generator = torch.Generator().manual_seed(3)

    def tokens(count: int) -> torch.Tensor:
        return torch.randint(0, 6561, (1, count), generator=generator, dtype=torch.int32).to(device)

    prompt = tokens(prompt_tokens)
    prompt_mel = torch.randn(1, 2 * prompt_tokens, 80, generator=generator).to(device)
    spk = torch.randn(1, 192, generator=generator).to(device)
    binding = bind_flow("minicpmo45", prompt_mel.shape[1], n_timesteps)
    ours = StockStream(ours_flow, prompt, prompt_mel, spk, binding=binding)
    with torch.inference_mode():
        prompt_state = theirs_flow.setup_cache(
            torch.cat([prompt, prompt[:, :3]], dim=1), prompt_mel, spk, n_timesteps=n_timesteps
        )
        prompt_state = {key: value.clone() for key, value in prompt_state.items()}
        vendor = SimpleNamespace(stream_cache=None, flow=theirs_flow, CONFORMER_HISTORY_FRAMES=100)
        _assert_state(ours.state, prompt_state, "prompt set-up")
        for turn, calls in enumerate(turns):
            ours.reset()
            vendor.stream_cache = {key: value.clone() for key, value in prompt_state.items()}
            for index, (count, last) in enumerate(calls):
                where = f"turn {turn} call {index} ({count} tokens, last={last})"
                chunk = tokens(count)
                mel = ours.chunk(chunk, last_chunk=last)
                expected, vendor.stream_cache = theirs_flow.inference_chunk(
                    token=chunk,
                    spk=spk,
                    cache=vendor.stream_cache,
                    last_chunk=last,
                    n_timesteps=n_timesteps,
                )
                token2wav._trim_estimator_cache(vendor, prompt_mel.shape[1])
                token2wav._trim_conformer_cache(vendor, prompt_mel.shape[1])
                assert mel.shape == expected.shape, f"{where}: mel {mel.shape} != {expected.shape}"
                assert torch.equal(mel, expected), f"{where}: mel differs"
                _assert_state(ours.state, vendor.stream_cache, where)


def _assert_state(
    ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], where: str
) -> None:
    for key in CACHE_KEYS:
        a, b = ours[key], theirs[key]
        assert a.shape == b.shape, f"{where}: {key} shape {tuple(a.shape)} != {tuple(b.shape)}"
        assert torch.equal(a, b), f"{where}: {key} differs"


def _run_child(monkeypatch: pytest.MonkeyPatch, name: str, *, dynamo: bool) -> None:
    require_vendor()
    monkeypatch.setenv(CHILD_ENV, "1")
    if not dynamo:
        monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    run_isolated(__file__, name)


@pytest.mark.oracle
def test_flow_stream_matches_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU: full-size flow model, P = 40 frames, 2 solver steps, 30 calls over 3 turns.

    Reduced operating point for two CPU cores (the DiT stays at full width and depth: the vendor
    CFM hard-codes its envelope for it). Dynamo is off in the child (``TORCHDYNAMO_DISABLE``): the
    vendor encoder's ``torch.compile(backend="eager")`` runs the same operations, and
    ``test_oracle_encoder`` (GPU) covers it compiled.
    """
    _run_child(monkeypatch, "test_flow_stream_child_cpu", dynamo=False)


@pytest.mark.oracle
@child_only
def test_flow_stream_child_cpu() -> None:
    _stream("cpu", prompt_tokens=20, n_timesteps=2, turns=[TURN[:7], TURN, LONG_TURN])


@pytest.mark.oracle
@pytest.mark.gpu
def test_flow_stream_matches_vendor_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA: the full operating point (P = 302, 10 solver steps), vendor compiled as shipped."""
    _run_child(monkeypatch, "test_flow_stream_child_gpu", dynamo=True)


@pytest.mark.oracle
@pytest.mark.gpu
@child_only
def test_flow_stream_child_gpu() -> None:
    _stream("cuda", prompt_tokens=151, n_timesteps=10, turns=[TURN[:7], TURN, LONG_TURN, TURN])


# A reduced model for the vendor-free checks below: the semantics do not depend on the sizes.
SMALL = FlowConfig(
    input_size=64,
    encoder=EncoderConfig(
        input_size=64, output_size=64, num_blocks=1, num_up_blocks=1, linear_units=96
    ),
    decoder=CFMConfig(estimator=DiTConfig(depth=2, num_heads=2, head_dim=32, hidden_size=64)),
)


@pytest.fixture(scope="module")
def small_flow() -> CausalMaskedDiffWithXvec:
    flow = build_flow(SMALL, seed=2)
    randomize_(flow, 2)
    return flow


def _small_stream(flow: CausalMaskedDiffWithXvec, seed: int) -> StockStream:
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 6561, (1, 10), generator=generator)
    mel = torch.randn(1, 20, 80, generator=generator)
    spk = torch.randn(1, 192, generator=generator)
    return StockStream(flow, prompt, mel, spk, binding=bind_flow("minicpmo45", 20, 2))


def test_paused_stream_survives_other_streams_on_the_same_module(
    small_flow: CausalMaskedDiffWithXvec,
) -> None:
    """The vendor's caches alias decoder buffers; ours are copied out, so interleaving is safe."""
    flow = small_flow
    calls = [
        torch.randint(0, 6561, (1, 28), generator=torch.Generator().manual_seed(i))
        for i in range(5)
    ]
    alone = _small_stream(flow, seed=1)
    expected = [alone.chunk(tokens) for tokens in calls]
    first, second = _small_stream(flow, seed=1), _small_stream(flow, seed=8)
    for tokens, mel in zip(calls, expected, strict=True):
        second.chunk(tokens.flip(1))  # another stream writes the decoder's buffers in between
        assert torch.equal(first.chunk(tokens), mel)
    first.reset()
    assert torch.equal(first.chunk(calls[0]), expected[0]), "reset must restore the prompt state"


def test_chunk_sizes_are_validated(small_flow: CausalMaskedDiffWithXvec) -> None:
    stream = _small_stream(small_flow, seed=1)
    with pytest.raises(ValueError, match="lookahead"):
        stream.chunk(torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="at most 28"):
        stream.chunk(torch.zeros(1, 29, dtype=torch.long))
    before = {key: value.clone() for key, value in stream.state.items()}
    assert stream.chunk(torch.zeros(1, 0, dtype=torch.long), last_chunk=True).shape == (1, 80, 0)
    assert all(torch.equal(stream.state[key], before[key]) for key in before), "empty call moved"
    assert stream.chunk(torch.ones(1, 2, dtype=torch.long), last_chunk=True).shape == (1, 80, 4)

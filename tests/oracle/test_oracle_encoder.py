"""Our ``UpsampleConformerEncoderV2.forward_chunk`` equals the vendor's bit for bit while streaming.

Same random weights (ours, loaded into the vendor's module with ``strict=True``: names and shapes
match), same inputs, a whole stream of calls: the prompt set-up, flush-sized and steady calls, the
"prompt + 100" conformer trim, a turn reset to the prompt-only state and a final chunk.
``torch.equal`` on every output and every cache.

The vendor module changes process-wide ``torch._dynamo`` settings on import and runs its
``forward_chunk`` under ``torch.compile(backend="eager")``, so each
comparison runs in its own interpreter: the ``*_child`` tests run only there.
"""

from __future__ import annotations

import os

import pytest
import torch

from adapters.token2wav.binding import bind_flow
from adapters.token2wav.config import EncoderConfig
from adapters.token2wav.encoder import UpsampleConformerEncoderV2
from adapters.token2wav.stock import trim_conformer_cache
from adapters.weights import randomize_
from tests.oracle.vendor import require_vendor, run_isolated, vendor_module

CHILD_ENV = "DUPLEXCADENCE_ORACLE_CHILD"
IN_CHILD = os.environ.get(CHILD_ENV) == "1"
child_only = pytest.mark.skipif(
    not IN_CHILD, reason="runs in its own interpreter, started by its parent test"
)

# Turn 1: a flush-sized start, steady 28-token windows, a partial flush, a last chunk; turn 2
# (after the reset) again. Sizes are token counts including the 3 lookahead tokens.
CALLS = [(8, False), (28, False), (28, False), (28, False), (17, False), (28, False), (12, True)]


# CPU: full width and heads, fewer blocks and a narrower feed-forward (2 s per call otherwise
# on two shared cores); every code path is the same. The GPU variant runs the released sizes.
REDUCED = EncoderConfig(num_blocks=2, num_up_blocks=2, linear_units=1024)


def _stream(device: str, prompt_tokens: int, config: EncoderConfig) -> None:
    require_vendor()
    vendor = vendor_module("cosyvoice2.transformer.upsample_encoder_v2")
    ours = UpsampleConformerEncoderV2(config)
    randomize_(ours, seed=11)
    ours.to(device).eval()
    theirs = vendor.UpsampleConformerEncoderV2(
        input_size=config.input_size,
        output_size=config.output_size,
        pre_lookahead_len=config.pre_lookahead_len,
        num_blocks=config.num_blocks,
        num_up_blocks=config.num_up_blocks,
        up_stride=config.up_stride,
        up_scale_factor=config.up_scale_factor,
        attention_heads=config.attention_heads,
        key_bias=config.key_bias,
        linear_units=config.linear_units,
    )
    theirs.load_state_dict(ours.state_dict(), strict=True)
    theirs = theirs.to(device).eval()
    generator = torch.Generator().manual_seed(5)

    def inputs(tokens: int) -> torch.Tensor:
        return torch.randn(1, tokens, 512, generator=generator).to(device)

    prompt_frames = 2 * prompt_tokens
    depth = len(ours.encoders)
    retention = bind_flow("minicpmo45", prompt_frames).conformer  # H[:P] ‖ H[-100:] per rate
    with torch.inference_mode():
        prompt = inputs(prompt_tokens + 3)
        base_ours = ours.forward_chunk(prompt, False, None, None)
        base_theirs = theirs.forward_chunk(prompt, False, None, None)
        _assert_equal(base_ours, base_theirs, "prompt set-up")
        for turn in range(2):
            cnn_o, att_o = base_ours[1].clone(), base_ours[2].clone()
            cnn_t, att_t = base_theirs[1].clone(), base_theirs[2].clone()
            for index, (tokens, last) in enumerate(CALLS):
                xs = inputs(tokens)
                out_o = ours.forward_chunk(xs, last, cnn_o, att_o)
                out_t = theirs.forward_chunk(xs, last, cnn_t, att_t)
                _assert_equal(out_o, out_t, f"turn {turn} call {index}")
                cnn_o, cnn_t = out_o[1], out_t[1]
                att_o = trim_conformer_cache(out_o[2], retention, depth)
                att_t = trim_conformer_cache(out_t[2], retention, depth)


def _assert_equal(
    ours: tuple[torch.Tensor, ...], theirs: tuple[torch.Tensor, ...], where: str
) -> None:
    for name, a, b in zip(("h", "cnn_cache", "att_cache"), ours, theirs, strict=True):
        assert a.shape == b.shape, f"{where}: {name} shape {tuple(a.shape)} != {tuple(b.shape)}"
        assert torch.equal(a, b), f"{where}: {name} differs by {(a - b).abs().max().item()}"


@pytest.mark.oracle
def test_encoder_stream_matches_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU: reduced depth (see ``REDUCED``), a 20-token prompt (P = 40), 15 calls over two turns.

    Dynamo is off in this child (``TORCHDYNAMO_DISABLE``): its eager backend runs the same
    operations but compiling costs a minute on two cores; the GPU variant keeps it on as shipped.
    """
    require_vendor()
    monkeypatch.setenv(CHILD_ENV, "1")
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    run_isolated(__file__, "test_encoder_stream_child_cpu")


@pytest.mark.oracle
@child_only
def test_encoder_stream_child_cpu() -> None:
    _stream("cpu", prompt_tokens=20, config=REDUCED)


@pytest.mark.oracle
@pytest.mark.gpu
def test_encoder_stream_matches_vendor_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA: released encoder sizes and the full operating point's prompt (151 tokens, P = 302)."""
    require_vendor()
    monkeypatch.setenv(CHILD_ENV, "1")
    run_isolated(__file__, "test_encoder_stream_child_gpu")


@pytest.mark.oracle
@pytest.mark.gpu
@child_only
def test_encoder_stream_child_gpu() -> None:
    _stream("cuda", prompt_tokens=151, config=EncoderConfig())

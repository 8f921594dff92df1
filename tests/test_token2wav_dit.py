"""Unit tests of our DiT estimator and CFM solver (no vendor code needed).

Shapes, cache layout (new frames first), the device-resident timestep table, the explicit-output
and per-step paths against the stock path (bit for bit), the noise offset rule, the envelope
errors, and that a random build leaves no zero-initialised layer. CPU tests use a reduced DiT
(depth 2, hidden 64, 2 heads of 32) and a small envelope; the random-build test uses the full size.
The GPU test captures one solver step in a CUDA graph and checks replay against eager.
"""

from __future__ import annotations

import pytest
import torch

from adapters.token2wav.cfm import CausalConditionalCFM, cosine_schedule, euler_times
from adapters.token2wav.dit import DiT, frequency_table
from adapters.weights import randomize_

DEPTH, HIDDEN, HEADS, HEAD_DIM = 2, 64, 2, 32


def small_dit(seed: int = 3, envelope_frames: int | None = 200) -> DiT:
    dit = DiT(
        depth=DEPTH,
        num_heads=HEADS,
        head_dim=HEAD_DIM,
        hidden_size=HIDDEN,
        envelope_frames=envelope_frames,
    )
    randomize_(dit, seed)
    return dit.eval()


def small_cfm(seed: int = 3, device: str = "cpu") -> CausalConditionalCFM:
    generator = torch.Generator().manual_seed(seed + 1)
    cfm = CausalConditionalCFM(small_dit(seed), generator=generator, envelope_frames=200)
    return cfm.to(device).eval()


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def dit_inputs(frames: int, seed: int = 1) -> Inputs:
    """``(x, mu, t, spks, cond)`` for the CFG batch of 2."""
    x, mu, cond = (randn(2, 80, frames, seed=seed + i) for i in range(3))
    return x, mu, torch.rand(2, generator=torch.Generator().manual_seed(seed)), randn(2, 80), cond


def test_resident_frequency_table_equals_the_per_call_table() -> None:
    dit = small_dit()
    assert torch.equal(dit.t_embedder.freqs, frequency_table(256))
    t = torch.rand(2, generator=torch.Generator().manual_seed(4))
    stock = dit.t_embedder(t)
    assert torch.equal(dit.t_embedder(t, resident=True), stock)
    assert "t_embedder.freqs" not in dit.state_dict(), "the table is not a checkpoint key"


@pytest.mark.parametrize("past", [None, 7])
def test_forward_chunk_shapes_and_new_frames_first(past: int | None) -> None:
    dit, frames = small_dit(), 11
    cnn = None if past is None else randn(DEPTH, 2, 2 * HIDDEN, 2, seed=8)
    att = None if past is None else randn(DEPTH, 2, HEADS, past, 2 * HEAD_DIM, seed=9)
    with torch.no_grad():
        out, new_cnn, new_att = dit.forward_chunk(*dit_inputs(frames), cnn, att)
    extent = frames + (past or 0)
    assert out.shape == (2, 80, frames)
    assert new_cnn.shape == (DEPTH, 2, 2 * HIDDEN, 2)
    assert new_att.shape == (DEPTH, 2, HEADS, extent, 2 * HEAD_DIM)
    if att is not None:  # the old cache follows the new frames
        assert torch.equal(new_att[:, :, :, frames:], att)
    assert dit.cnn_cache_buffer is not None and dit.att_cache_buffer is not None
    assert new_cnn.data_ptr() == dit.cnn_cache_buffer.data_ptr(), "stock caches are the envelope"
    assert new_att.data_ptr() == dit.att_cache_buffer.data_ptr()


def test_explicit_outputs_equal_the_envelope_path() -> None:
    dit, frames, past = small_dit(), 9, 5
    cnn, att = randn(DEPTH, 2, 2 * HIDDEN, 2, seed=2), randn(DEPTH, 2, HEADS, past, 64, seed=3)
    cnn_out = torch.full_like(cnn, float("nan"))
    att_out = torch.full((DEPTH, 2, HEADS, past + frames, 64), float("nan"))
    with torch.no_grad():
        stock = [y.clone() for y in dit.forward_chunk(*dit_inputs(frames), cnn, att)]
        ours = dit.forward_chunk(
            *dit_inputs(frames), cnn, att, resident=True, cnn_out=cnn_out, att_out=att_out
        )
    assert ours[1] is cnn_out and ours[2] is att_out
    for a, b in zip(stock, ours, strict=True):
        assert torch.equal(a, b)


def test_random_build_leaves_no_zero_initialised_layer() -> None:
    """Full-size DiT (no envelope): adaLN-zero and output layers must be random too."""
    dit = DiT(envelope_frames=None)
    randomize_(dit, seed=5)
    flat = [name for name, p in dit.named_parameters() if float(p.detach().std()) == 0.0]
    assert not flat, f"parameters left constant: {flat[:5]}"


def test_schedule_times_follow_the_vendor_accumulation() -> None:
    t_span = cosine_schedule(10, torch.device("cpu"), torch.float32)
    times = euler_times(t_span)
    assert len(times) == 10
    t, dt = t_span[0].unsqueeze(0), t_span[1] - t_span[0]
    for k, (tk, dtk) in enumerate(times):
        assert torch.equal(tk, t) and torch.equal(dtk, dt)
        t = t + dt
        if k + 1 < 10:
            dt = t_span[k + 2] - t


def _chunk_inputs(frames: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(mu, spks, cond)`` of one chunk."""
    return (
        randn(1, 80, frames, seed=seed),
        randn(1, 80, seed=seed + 1),
        randn(1, 80, frames, seed=seed + 2),
    )


def test_step_loop_with_caller_outputs_equals_forward_chunk() -> None:
    """The unit the replay arms capture, looped by hand, reproduces the stock chunk bit for bit."""
    cfm, n = small_cfm(), 3
    mu, spks, cond = _chunk_inputs(12, seed=20)
    _, cnn, att = cfm.forward_chunk(mu, spks, cond, n_timesteps=n)
    cnn, att = cnn[:n].clone(), att[:n].clone()  # copy out before the next call overwrites
    mu, spks, cond = _chunk_inputs(10, seed=30)
    mel, new_cnn, new_att = (y.clone() for y in cfm.forward_chunk(mu, spks, cond, n, 1.0, cnn, att))

    x = cfm.rand_noise[:, :, 12:22] * 1.0
    consts = cfm.cfg_inputs(mu, spks, cond)
    t_span = cosine_schedule(n, mu.device, mu.dtype)
    with torch.inference_mode():
        for k, (t, dt) in enumerate(euler_times(t_span)):
            cnn_out, att_out = torch.empty_like(cnn[k]), torch.empty((*att[k].shape[:3], 22, 64))
            x, _, _ = cfm.step(
                x, t, dt, *consts, cnn[k], att[k], resident=True, cnn_out=cnn_out, att_out=att_out
            )
            assert torch.equal(cnn_out, new_cnn[k]) and torch.equal(att_out, new_att[k])
    assert torch.equal(x, mel)


def test_noise_is_sliced_at_the_attended_extent() -> None:
    cfm, n = small_cfm(), 2
    mu, spks, cond = _chunk_inputs(6, seed=40)
    cnn, att = randn(n, DEPTH, 2, 128, 2, seed=41), randn(n, DEPTH, 2, HEADS, 17, 64, seed=42)
    mel = cfm.forward_chunk(mu, spks, cond, n, 1.0, cnn, att)[0].clone()
    t_span = cosine_schedule(n, mu.device, mu.dtype)
    z = cfm.rand_noise[:, :, 17:23] * 1.0
    with torch.inference_mode():
        assert torch.equal(cfm.solve_euler_chunk(z, t_span, mu, spks, cond, cnn, att)[0], mel)
        other = cfm.solve_euler_chunk(
            cfm.rand_noise[:, :, :6] * 1.0, t_span, mu, spks, cond, cnn, att
        )
    assert not torch.equal(other[0], mel), "the offset must select different noise"


def test_envelope_limits_fail_with_a_fix() -> None:
    cfm = small_cfm()
    mu, spks, cond = _chunk_inputs(8, seed=50)
    att = randn(2, DEPTH, 2, HEADS, 195, 64, seed=51)
    with pytest.raises(AssertionError, match="trim the attention cache"):
        cfm.forward_chunk(mu, spks, cond, 2, 1.0, None, att)
    with pytest.raises(AssertionError, match="slots"):
        cfm.forward_chunk(mu, spks, cond, n_timesteps=17)


@pytest.mark.gpu
def test_captured_step_replays_the_eager_step() -> None:
    """Full-size DiT on CUDA: one solver step with resident table and caller-owned outputs is
    captured once and replayed; every output equals the eager stock step (envelope, CPU table).
    Outputs are poisoned with NaN before replay so a stale result cannot pass."""
    torch.manual_seed(0)
    dit = DiT()
    randomize_(dit, 7)
    cfm = CausalConditionalCFM(dit, generator=torch.Generator().manual_seed(8))
    cfm = cfm.to("cuda").eval()
    frames, past = 50, 302
    mu, spks, cond = (y.cuda() for y in _chunk_inputs(frames, seed=60))
    cnn = randn(16, 2, 1024, 2, seed=61).cuda()  # full depth 16, hidden 512
    att = randn(16, 2, 8, past, 128, seed=62).cuda()
    x = randn(1, 80, frames, seed=63).cuda()
    t, dt = euler_times(cosine_schedule(10, x.device, x.dtype))[3]
    consts = cfm.cfg_inputs(mu, spks, cond)
    cnn_out, att_out = (
        torch.empty_like(cnn),
        torch.empty(16, 2, 8, past + frames, 128, device="cuda"),
    )
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode(), torch.cuda.stream(stream):
        for _ in range(2):  # warm up on the capture stream
            cfm.step(x, t, dt, *consts, cnn, att, resident=True, cnn_out=cnn_out, att_out=att_out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            x_next, _, _ = cfm.step(
                x, t, dt, *consts, cnn, att, resident=True, cnn_out=cnn_out, att_out=att_out
            )
    torch.cuda.current_stream().wait_stream(stream)
    with torch.inference_mode():
        eager = [y.clone() for y in cfm.step(x, t, dt, *consts, cnn, att)]
        for out in (x_next, cnn_out, att_out):
            out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    for a, b in zip(eager, (x_next, cnn_out, att_out), strict=True):
        assert torch.equal(a, b)

"""PersonaPlex's rings: once full, the oldest slot is not attended (its fork's ``RingKVCache``).

Self-contained (CI): the positions its fork's ``complete`` gives (written out from its code),
a streaming transformer with our rings equal with and without the shared clock, and where
``moshi``'s ring parts from them (the first step that fills the ring). Against the fork itself
(skipped where ``.vendor/personaplex`` is absent, as in CI): its transformer and its Mimi, frame
by frame past the wrap (frame 124 for Mimi's context of 250).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from adapters.moshi.clock import share_clocks
from adapters.moshi.frame import FrameOps
from adapters.moshi.vendor import vendor_class
from adapters.personaplex.frame import PersonaPlexOps
from adapters.personaplex.rings import personaplex_rings, ring_class

CODE = Path(__file__).resolve().parents[1] / ".vendor" / "personaplex" / "moshi"
needs_code = pytest.mark.skipif(
    not (CODE / "models" / "lm.py").is_file(),
    reason="needs PersonaPlex's code in .vendor/personaplex (bench/kit.sh . personaplex)",
)

# The fork's positions, capacity 6, two steps a call (as Mimi's transformers step), from its
# ``RingKVCache.complete``: at the third call the ring is full and slot 0 (step 0) reads 6.
FORK_T2 = [
    [0, 1, -1, -1, -1, -1],
    [0, 1, 2, 3, -1, -1],
    [6, 1, 2, 3, 4, 5],
    [6, 7, 8, 3, 4, 5],
    [6, 7, 8, 9, 10, 5],
]
MOSHI_T2 = [
    [0, 1, -1, -1, -1, -1],
    [0, 1, 2, 3, -1, -1],
    [0, 1, 2, 3, 4, 5],
    [6, 7, 2, 3, 4, 5],
    [6, 7, 8, 9, 4, 5],
]
# one step a call (the temporal transformer), capacity 4
FORK_T1 = [[0, -1, -1, -1], [0, 1, -1, -1], [0, 1, 2, -1], [4, 1, 2, 3], [4, 5, 2, 3]]
MOSHI_T1 = [[0, -1, -1, -1], [0, 1, -1, -1], [0, 1, 2, -1], [0, 1, 2, 3], [4, 1, 2, 3]]

CONTEXT = 10  # a small transformer's ring: full at the 10th step, the 5th call of two steps


def _positions(ring: Any, steps: int, t: int) -> list[list[int]]:
    out = []
    for _ in range(steps):
        k = torch.zeros(1, 1, t, 2)
        out.append(ring.complete(k, k, torch.ones(1, dtype=torch.bool)).positions[0].tolist())
    return out


@pytest.mark.parametrize(
    ("t", "capacity", "fork", "moshi"),
    [(2, 6, FORK_T2, MOSHI_T2), (1, 4, FORK_T1, MOSHI_T1)],
    ids=["two-steps", "one-step"],
)
def test_the_rings_label_the_oldest_slot_as_the_fork_does(
    t: int, capacity: int, fork: list[list[int]], moshi: list[list[int]]
) -> None:
    from moshi.modules.transformer import RingKVCache

    def ring(cls: type) -> Any:
        return cls(1, 1, 2, capacity, respect_exec_mask=True, device="cpu", dtype=torch.float32)

    assert _positions(ring(ring_class()), len(fork), t) == fork
    assert _positions(ring(RingKVCache), len(moshi), t) == moshi  # moshi 0.2.13: all attended


def _config() -> dict[str, Any]:
    """Mimi's transformer config, narrow, with a ring of :data:`CONTEXT`."""
    from moshi.models import loaders

    config = dict(loaders._mimi_config["transformer"])
    config.update(d_model=64, num_heads=4, num_layers=3, dim_feedforward=128, context=CONTEXT)
    config.update(input_dimension=64, output_dimensions=(64,))
    return config


def _transformer(seed: int = 0) -> Any:
    from moshi.modules.transformer import ProjectedTransformer

    torch.manual_seed(seed)
    return ProjectedTransformer(**_config()).eval()


@contextmanager
def _eager() -> Iterator[None]:
    """No grad, and compile off in ``moshi`` and (where loaded) the fork, as on the CPU in our
    stream and in its loop (a module outside a layer would compile otherwise)."""
    from moshi.utils.compile import no_compile

    with ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.enter_context(no_compile())
        if (fork := sys.modules.get("personaplex_moshi")) is not None:
            stack.enter_context(fork.utils.compile.no_compile())
        yield


def _stream(model: Any, x: torch.Tensor, t: int) -> list[torch.Tensor]:
    with _eager():
        return [model(x[..., i : i + t])[0] for i in range(0, x.shape[-1], t)]


def _first_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> int | None:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=True)) if not torch.equal(x, y)), None
    )


@pytest.mark.parametrize("t", [2, 1], ids=["two-steps", "one-step"])
def test_clocked_rings_equal_unclocked_and_part_from_moshis_where_the_ring_fills(t: int) -> None:
    x = torch.randn(1, 64, 4 * CONTEXT, generator=torch.Generator().manual_seed(1))
    outs = {}
    for name in ("rings", "rings+clocks", "moshi"):
        model = _transformer()
        with model.streaming(1):
            if name != "moshi":
                assert personaplex_rings(model) == 3
            if name == "rings+clocks":
                assert share_clocks(model) == 2
                leader = model.transformer.layers[0].self_attn._streaming_state.kv_cache
                assert vendor_class(leader) is ring_class()  # the clock leads on our ring
            outs[name] = _stream(model, x, t)
    assert _first_difference(outs["rings+clocks"], outs["rings"]) is None
    assert _first_difference(outs["moshi"], outs["rings"]) == CONTEXT // t - 1  # the ring fills


def test_rings_go_in_before_the_clocks_and_only_for_personaplex() -> None:
    model = _transformer()
    with model.streaming(1):
        share_clocks(model)
        with pytest.raises(ValueError, match="before the clocks"):
            personaplex_rings(model)
    with model.streaming(1):  # fresh rings
        assert FrameOps.own_rings(model, model) == 0  # Moshi keeps moshi's
        assert PersonaPlexOps.own_rings(model, torch.nn.Module()) == 3
        assert personaplex_rings(model) == 3  # again: already ours


def test_a_personaplex_stream_keeps_the_forks_rings() -> None:
    from engine.arms import Arm
    from tests.moshi_small import make_stream as moshi_stream
    from tests.personaplex_small import make_stream

    for make, expected in ((make_stream, ring_class()), (moshi_stream, None)):
        stream, _ = make(Arm.EAGER)
        rings = {
            vendor_class(m._streaming_state.kv_cache)
            for model in (stream.ops.mimi, stream.ops.lm)
            for m in model.modules()
            if type(m).__name__.endswith("StreamingMultiheadAttention")
        }
        from moshi.modules.transformer import RingKVCache

        assert rings == {expected or RingKVCache}


# -- against PersonaPlex's own code (outside CI) ------------------------------------------------


@needs_code
@pytest.mark.parametrize("t", [2, 1], ids=["two-steps", "one-step"])
def test_our_transformer_equals_the_forks_past_the_wrap(t: int) -> None:
    from bench.personaplex_vendor import _their_weights, load_code

    pp = load_code(CODE)
    ours, plain = _transformer(), _transformer()
    theirs = pp.modules.transformer.ProjectedTransformer(**_config()).eval()
    theirs.load_state_dict(_their_weights(theirs.state_dict(), ours.state_dict()), strict=True)
    x = torch.randn(1, 64, 4 * CONTEXT, generator=torch.Generator().manual_seed(2))
    with ours.streaming(1), plain.streaming(1), theirs.streaming(1):
        personaplex_rings(ours)
        share_clocks(ours, plain)
        a, b, c = _stream(ours, x, t), _stream(theirs, x, t), _stream(plain, x, t)
    assert _first_difference(a, b) is None
    assert _first_difference(c, b) == CONTEXT // t - 1


MIMI_FRAMES = 130  # Mimi's rings (250 steps at 25 Hz) fill at frame 124


@needs_code
@pytest.mark.timeout(600)  # about 20 s of CPU: outside CI only
def test_our_mimi_equals_personaplex_own_mimi_past_frame_124() -> None:
    """Its Mimi and ours (our rings, clocked as in our stream) on the same seeded weights and
    input, frame by frame: the encoder transformer's output, the codes, the speech decoded from
    the same codes. With ``moshi``'s own rings both transformers part at frame 124."""
    from adapters.personaplex.config import size_for
    from bench.personaplex_vendor import load_code, their_mimi
    from tests.personaplex_small import DECLARATION, SPF, models

    pp = load_code(CODE)
    m = models(seed=3)
    theirs = their_mimi(pp, m, size_for("small", DECLARATION))
    ours = m.mimi
    latents: dict[str, list[torch.Tensor]] = {"ours": [], "theirs": []}
    for name, mimi in (("ours", ours), ("theirs", theirs)):
        mimi.encoder_transformer.register_forward_hook(
            lambda _m, _i, out, n=name: latents[n].append(out[0].clone())
        )
    g = torch.Generator().manual_seed(7)
    pcm = 0.2 * torch.randn(MIMI_FRAMES, 1, 1, SPF, generator=g)
    first: dict[str, dict[str, int | None]] = {}
    for rings in ("ours", "moshi"):
        differ: dict[str, int | None] = {"encoder": None, "codes": None, "speech": None}
        with _eager(), ours.streaming(1), theirs.streaming(1):
            if rings == "ours":
                layers = len(ours.encoder_transformer.transformer.layers)
                assert personaplex_rings(ours) == 2 * layers  # the encoder's and the decoder's
                share_clocks(ours)
            for f in range(MIMI_FRAMES):
                a, b = ours.encode(pcm[f]), theirs.encode(pcm[f])
                seen = {
                    "encoder": torch.equal(latents["ours"][-1], latents["theirs"][-1]),
                    "codes": torch.equal(a, b),
                    "speech": torch.equal(ours.decode(b), theirs.decode(b)),
                }
                for key, equal in seen.items():
                    if differ[key] is None and not equal:
                        differ[key] = f
        first[rings] = differ
    assert first["ours"] == {"encoder": None, "codes": None, "speech": None}
    moshi = first["moshi"]
    assert (moshi["encoder"], moshi["speech"]) == (124, 124)  # the 250th step at 25 Hz
    assert moshi["codes"] is None or moshi["codes"] >= 124  # codes may round alike a while


@needs_code
@pytest.mark.timeout(600)  # about 30 s of CPU: outside CI only
def test_personaplex_own_loop_and_mimi_equal_ours_past_the_wrap(tmp_path: Path) -> None:
    """``bench/personaplex_vendor.py --tiny`` over 130 frames, its eager loop with its own Mimi:
    every frame equal (with ``moshi``'s rings in our Mimi: 124 exact, speech at frame 124)."""
    from bench.personaplex_vendor import main

    args = [str(tmp_path), "--tiny", "--frames", str(MIMI_FRAMES), "--voice-frames", "5"]
    report = main([*args, "--role", "casual", "--seed", "1", "--runs", "eager"])
    theirs = report["runs"]["theirs_eager"]
    assert theirs["mimi"] == "theirs"
    assert theirs["first_difference"] is None
    assert theirs["exact_frames"] == theirs["frames"] == MIMI_FRAMES

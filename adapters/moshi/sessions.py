"""Moshi sessions on one set of weights (``adapters.face.SessionSource``).

The LM and Mimi are built once (:meth:`MoshiFamily.load_sessions`) and never stream themselves.
A session streams on its own twins of them: module trees that share every parameter and buffer
with the originals (the weights) but hold their own streaming states (rings sized by the
declaration, offsets, the delay cache, convolution states), clocks, replay engine and graphs.
So a session is the vendor's loop over the released weights, alone with its state, whatever
the others do. One session (the app's ``converse``) is the same thing with N = 1.

Among many (``converse --sessions N``, :meth:`MoshiSessions.open_multiplexed`) each session keeps
its own bindings (``bindings`` = ``"per-session"``): one set shared by all would copy 2 x its
1.5 GiB of rings every 80-ms frame (``engine.multiplex``'s docstring has the arithmetic).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

from adapters.face import EagerGuard, LoadedModel, Progress
from adapters.moshi.checkpoint import MoshiModels
from adapters.moshi.config import MoshiSize, state_bytes
from adapters.moshi.periods import MoshiPeriods, check_regions, warm_up
from engine.arms import Arm
from engine.contract import Declaration

if TYPE_CHECKING:
    from engine.multiplex import SessionRng

__all__ = ["MoshiSessions", "share_codebooks", "twin"]

SAMPLING_KEYS = ("temp", "temp_text", "top_k", "top_k_text", "use_sampling")


def _quiet(stage: str, fraction: float) -> None:
    """A session opened among many reports nothing: the multiplexer's caller reports."""


def twin(module: torch.nn.Module) -> Any:
    """A copy of ``module``'s tree sharing its parameters and buffers (no weight is copied):
    everything else (streaming state, Python attributes) is the twin's own."""
    memo: dict[int, Any] = {id(t): t for t in (*module.parameters(), *module.buffers())}
    return copy.deepcopy(module, memo)


def share_codebooks(mimi: torch.nn.Module) -> None:
    """Compute the codebooks Mimi uses once, on the weights, so every twin shares them.

    ``moshi``'s ``EuclideanCodebook.embedding`` is made on first use (``embedding_sum /
    cluster_usage``) and kept as a buffer of the module that used it. On a twin, that first use
    would give every session a copy of its own: 16 MiB at the released size (8 codebooks of
    2048 x 256 float32), beyond the state its declaration states. Made here by the same
    expression on the same device, each is the same tensor bit for bit, and a buffer: ``twin``
    shares it. Only the levels the quantizers use (``n_q``) are made, as a first use would.
    """
    from moshi.quantization.vq import ResidualVectorQuantizer

    for quantizer in mimi.modules():
        if isinstance(quantizer, ResidualVectorQuantizer):
            for level in quantizer.vq.layers[: quantizer.n_q]:
                level.embedding  # noqa: B018 (made here, kept as the level's buffer)


class MoshiSessions:
    """Moshi's weights on one device; :meth:`open` makes a session on them."""

    def __init__(
        self,
        models: MoshiModels,
        declaration: Declaration,
        size: MoshiSize,
        device: torch.device,
        *,
        title: str,
        build_s: float,
    ) -> None:
        self.models, self.declaration, self.size, self.device = models, declaration, size, device
        self.title, self.build_s = title, build_s
        share_codebooks(models.mimi)
        self.bindings = "per-session"  # open_multiplexed: each session captures its own
        values = size.point
        rate = declaration.clock_rate("sample", values)
        self.period_s = values["samples_per_frame"] / rate
        self.input_rate = self.output_rate = round(rate)

    def state_bytes(self, arm: Arm) -> int:
        """One session's declared state (``adapters.moshi.config.state_bytes``; every arm the
        same)."""
        return state_bytes(self.declaration, self.size)

    def open_multiplexed(
        self, seed: int, arm: Arm, rng: SessionRng, voice: int | None = None
    ) -> LoadedModel:
        """A conversation among many (``adapters.face.SessionSource``): :meth:`open` with its
        own bindings, its eager calls under ``rng``; Moshi's voice is its weights' (``voice``
        is not read). Its warm-up record says ``bindings``: ``per-session``."""
        loaded = self.open(seed, arm, rng.eager)
        loaded.warmup["bindings"] = "per-session"
        return loaded

    def open(
        self,
        seed: int,
        arm: Arm,
        eager_guard: EagerGuard | None = None,
        report: Progress = _quiet,
        only_own_arm: bool = False,
    ) -> LoadedModel:
        """A session: twins of the models streaming under ``arm``, warmed up (every replay
        arm's catalog captured, or ``only_own_arm``'s) and sealed, then its generator re-seeded
        with ``seed``."""
        from moshi.models.lm import LMGen

        from adapters.moshi.regions import ring_shapes
        from adapters.moshi.stream import MoshiStream
        from engine.replay import ReplayEngine

        models, device, values = self.models, self.device, self.size.point
        sampling = {k: v for k, v in models.sampling.items() if k in SAMPLING_KEYS}
        lm_gen = LMGen(twin(models.lm), **sampling)
        replay = ReplayEngine(device, eager_guard=eager_guard)
        sdpa = self.declaration.operators["lm_step"].kernels.get("sdpa", "default")
        stream = MoshiStream(
            twin(models.mimi),
            lm_gen,
            replay=replay,
            arm=arm,
            samples_per_frame=values["samples_per_frame"],
            sdpa=sdpa if device.type == "cuda" else "default",
            rings=ring_shapes(self.declaration, values),
        )
        check_regions(stream, self.declaration, values)
        report("loading", 1.0)
        warmup = warm_up(stream, replay, seed=seed, report=report, only_own_arm=only_own_arm)
        warmup["build_s"] = round(self.build_s, 3)
        torch.manual_seed(seed)  # the conversation's draws do not depend on the warm-up
        model = MoshiPeriods(stream, models.vocab, period_s=self.period_s, rate=self.input_rate)
        return LoadedModel(
            model=model,
            replay=replay,
            title=self.title,
            declaration=self.declaration.name,
            weights_synthetic=models.synthetic,
            stages=("encode", "lm", "decode", "frame"),
            warmup=warmup,
            facts={
                "model_size": self.size.name,
                "temporal_sdpa": stream.ops.sdpa,
                "rings": {k: sorted(v) for k, v in stream.ring_capacities().items()},
                "mimi_conv_values": stream.conv_values(),
                "clock_followers": stream.clock_followers,
                "sampling": {
                    "temp": lm_gen.temp,
                    "temp_text": lm_gen.temp_text,
                    "top_k": lm_gen.top_k,
                    "top_k_text": lm_gen.top_k_text,
                },
            },
            has_text=True,
            close=stream.close,
        )

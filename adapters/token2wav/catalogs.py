"""The replayed flow operators' catalogs: tensor signatures from shapes alone, before traffic.

Each :class:`CallClass` (token count, ``last_chunk``, attended extent: the plan's catalog) fixes
every shape of the four operators a :class:`~adapters.token2wav.stream.FlowStream` registers; a
signature lists them (with the carry's strides for the state-rule operators), so admission is
decided by the declaration, and a call the plan did not foresee is a counted miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from adapters.token2wav.chunks import call_frames
from engine.signature import Catalog, Signature, TensorSpec

if TYPE_CHECKING:
    from adapters.token2wav.stream import FlowStream


@dataclass(frozen=True)
class CallClass:
    """What fixes a flow call's shapes: its token count, ``last_chunk``, the attended extent."""

    tokens: int
    last_chunk: bool
    extent: int


class Catalogs:
    """Tensor signatures of the four operators for every call class, from shapes alone."""

    def __init__(self, stream: FlowStream, classes: tuple[CallClass, ...]) -> None:
        self.classes = classes
        state = stream.stock_shapes()
        self.dtype, self.device = (
            state["estimator_att_cache"].dtype,
            state["estimator_att_cache"].device,
        )
        self.conf_cnn = tuple(state["conformer_cnn_cache"].shape)
        self.conf_att = tuple(state["conformer_att_cache"].shape)
        self.est_cnn = tuple(state["estimator_cnn_cache"].shape)
        self.est_att = tuple(state["estimator_att_cache"].shape)
        self.carry_stride = stream.carry.buffer.stride()
        self.region = TensorSpec.like(stream.cnn_region)
        self.n_steps = stream.n_steps
        self.channels = stream.flow.encoder_proj.out_features

    def spec(self, shape: tuple[int, ...], stride: tuple[int, ...] | None = None) -> TensorSpec:
        return TensorSpec(shape, self.dtype, self.device, stride)

    def _frames(self, c: CallClass) -> int:
        return call_frames(c.tokens, c.last_chunk)

    def tokens(self, c: CallClass) -> TensorSpec:
        return TensorSpec((1, c.tokens), torch.int32, self.device)

    def conformer(self, c: CallClass) -> tuple[TensorSpec, TensorSpec]:
        att = (*self.conf_att[:3], c.extent, self.conf_att[4])
        return self.spec(self.conf_cnn), self.spec(att)

    def chunk_stock(self) -> Catalog:
        sigs = []
        for c in self.classes:
            att = (*self.est_att[:4], c.extent, self.est_att[5])
            args = (self.tokens(c), *self.conformer(c), self.spec(self.est_cnn), self.spec(att))
            sigs.append(Signature.of((*args, c.last_chunk)))
        return Catalog(sigs)

    def chunk_carry(self) -> Catalog:
        sigs = []
        for c in self.classes:
            view = self.spec(
                (self.n_steps, *self.est_att[1:4], c.extent, self.est_att[5]), self.carry_stride
            )
            args = (self.tokens(c), *self.conformer(c), view, self.region, c.last_chunk)
            sigs.append(Signature.of(args))
        return Catalog(sigs)

    def _step_inputs(self, c: CallClass, first: bool) -> tuple[TensorSpec, ...]:
        f, ch = self._frames(c), self.channels
        dt = self.spec(()) if first else self.spec((1,))
        return (
            self.spec((1, ch, f)),
            self.spec((1,)),
            dt,
            self.spec((2, ch, f)),
            self.spec((2, ch)),
            self.spec((2, ch, f)),
        )

    def step_stock(self) -> Catalog:
        sigs = []
        for c in self.classes:
            att = (*self.est_att[1:4], c.extent, self.est_att[5])
            for first in (True, False):
                args = (*self._step_inputs(c, first), self.spec(self.est_cnn[1:]), self.spec(att))
                sigs.append(Signature.of(args))
        return Catalog(sigs)

    def step_carry(self) -> Catalog:
        sigs = []
        for c in self.classes:
            view = self.spec(
                (self.n_steps, *self.est_att[1:4], c.extent, self.est_att[5]), self.carry_stride
            )
            for k in range(self.n_steps):
                args = (k, *self._step_inputs(c, k == 0), view, self.region)
                sigs.append(Signature.of(args))
        return Catalog(sigs)

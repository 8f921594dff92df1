"""The replayed flow operators' catalogs: tensor signatures from shapes alone, before traffic.

Each :class:`CallClass` (token count, ``last_chunk``, attended extent: the plan's catalog) fixes
every shape of the four operators :mod:`adapters.token2wav.operators` registers; a signature lists
them (with the carry's strides for the state-rule operators), so admission is decided by the
declaration, and a call the plan did not foresee is a counted miss. Extents go on the regions'
declared clock axes; every other size comes from the prompt-only state's own shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from adapters.token2wav.dit import CFG_BATCH
from engine.signature import Catalog, Signature, TensorSpec, contiguous_stride


@dataclass(frozen=True)
class CallClass:
    """What fixes a flow call's shapes: its token count, ``last_chunk``, the attended extent."""

    tokens: int
    last_chunk: bool
    extent: int


class Catalogs:
    """Tensor signatures of the four operators for every call class, from shapes alone.

    ``conformer`` holds the prompt-only conformer caches (dtype, device and shapes);
    ``est_cnn``/``est_att`` the stock estimator caches' shapes at the prompt (envelope slots
    first) and ``carry_shape`` the carry buffer's, all from the DiT's geometry, so no state is
    made to read a shape; ``estimator_axis`` and ``conformer_axis`` the clock axes of the two
    attention caches (slot axis 0 is the solver step); ``call_frames(tokens, last_chunk)`` the
    mel frames a call advances.
    """

    def __init__(
        self,
        classes: tuple[CallClass, ...],
        conformer: Mapping[str, Tensor],
        *,
        est_cnn: tuple[int, ...],
        est_att: tuple[int, ...],
        carry_shape: tuple[int, ...],
        n_steps: int,
        channels: int,
        estimator_axis: int,
        conformer_axis: int,
        call_frames: Callable[[int, bool], int],
    ) -> None:
        self.classes = classes
        like = conformer["conformer_att_cache"]
        self.dtype, self.device = like.dtype, like.device
        self.conf_cnn = tuple(conformer["conformer_cnn_cache"].shape)
        self.conf_att = tuple(like.shape)
        self.est_cnn, self.est_att = est_cnn, est_att
        self.carry_stride = contiguous_stride(carry_shape)
        self.region = self.spec((n_steps, *est_cnn[1:]))
        self.n_steps, self.channels = n_steps, channels
        self.est_axis, self.conf_axis = estimator_axis, conformer_axis
        self._call_frames = call_frames

    def spec(self, shape: tuple[int, ...], stride: tuple[int, ...] | None = None) -> TensorSpec:
        return TensorSpec(shape, self.dtype, self.device, stride)

    def tokens(self, c: CallClass) -> TensorSpec:
        return TensorSpec((1, c.tokens), torch.int32, self.device)

    def conformer(self, c: CallClass) -> tuple[TensorSpec, TensorSpec]:
        att = at_extent(self.conf_att, self.conf_axis, c.extent)
        return self.spec(self.conf_cnn), self.spec(att)

    def carry_view(self, c: CallClass) -> TensorSpec:
        """The carry's live view: ``n_steps`` slots at the class's extent, the buffer's strides."""
        shape = at_extent((self.n_steps, *self.est_att[1:]), self.est_axis, c.extent)
        return self.spec(shape, self.carry_stride)

    def chunk_stock(self) -> Catalog:
        sigs = []
        for c in self.classes:
            att = at_extent(self.est_att, self.est_axis, c.extent)
            args = (self.tokens(c), *self.conformer(c), self.spec(self.est_cnn), self.spec(att))
            sigs.append(Signature.of((*args, c.last_chunk)))
        return Catalog(sigs)

    def chunk_carry(self) -> Catalog:
        sigs = []
        for c in self.classes:
            args = (self.tokens(c), *self.conformer(c), self.carry_view(c), self.region)
            sigs.append(Signature.of((*args, c.last_chunk)))
        return Catalog(sigs)

    def _step_inputs(self, c: CallClass, first: bool) -> tuple[TensorSpec, ...]:
        f, ch, cfg = self._call_frames(c.tokens, c.last_chunk), self.channels, CFG_BATCH
        dt = self.spec(()) if first else self.spec((1,))
        return (
            self.spec((1, ch, f)),
            self.spec((1,)),
            dt,
            self.spec((cfg, ch, f)),
            self.spec((cfg, ch)),
            self.spec((cfg, ch, f)),
        )

    def step_stock(self) -> Catalog:
        sigs = []
        for c in self.classes:
            att = at_extent(self.est_att[1:], self.est_axis - 1, c.extent)  # one step's slot
            for first in (True, False):
                args = (*self._step_inputs(c, first), self.spec(self.est_cnn[1:]), self.spec(att))
                sigs.append(Signature.of(args))
        return Catalog(sigs)

    def step_carry(self) -> Catalog:
        sigs = []
        for c in self.classes:
            view = self.carry_view(c)
            for k in range(self.n_steps):
                args = (k, *self._step_inputs(c, k == 0), view, self.region)
                sigs.append(Signature.of(args))
        return Catalog(sigs)


def at_extent(shape: tuple[int, ...], axis: int, extent: int) -> tuple[int, ...]:
    """``shape`` with ``extent`` on its clock ``axis``."""
    return (*shape[:axis], extent, *shape[axis + 1 :])

"""Ablation arms: which of the two rules a stream runs under (the paper's ablation).

============  ==========================  ========  ============
arm           state rule (sizing, carry)  replay    granularity
============  ==========================  ========  ============
``eager``     no (stock allocation)       no        --
``S``         yes                         no        --
``R``         no                          yes       solver step
``Rc``        no                          yes       chunk
``SR``        yes                         yes       solver step
``SRc``       yes                         yes       chunk
============  ==========================  ========  ============

Every arm equals ``eager`` bit for bit; an arm that cannot replay a call runs it eagerly and counts
why. Arms may change between two calls of one stream: adapters keep its state in a form both
disciplines read (see :class:`ArmedStream`), so a switch moves state, never recomputes it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol, runtime_checkable


class Granularity(StrEnum):
    """The clock at which one replayed graph runs: one solver step, or one whole chunk."""

    STEP = "step"
    CHUNK = "chunk"


class Arm(StrEnum):
    """One cell of the ablation: the state rule on or off, replay off or at a granularity."""

    EAGER = "eager"
    S = "S"
    R = "R"
    RC = "Rc"
    SR = "SR"
    SRC = "SRc"

    @property
    def state_rule(self) -> bool:
        """Demand-sized regions and the carry (instead of the stock static envelope and ``cat``)."""
        return self in (Arm.S, Arm.SR, Arm.SRC)

    @property
    def replay(self) -> bool:
        """ExactShapeReplay admission for the stream's operators."""
        return self.granularity is not None

    @property
    def granularity(self) -> Granularity | None:
        """The replay unit, or None when the arm does not replay."""
        if self in (Arm.R, Arm.SR):
            return Granularity.STEP
        if self in (Arm.RC, Arm.SRC):
            return Granularity.CHUNK
        return None

    @classmethod
    def parse(cls, text: str) -> Arm:
        """Read an arm name as a user types it (``src``, ``SRc`` and ``SRC`` all mean SRc)."""
        for arm in cls:
            if text.strip().lower() == arm.value.lower():
                return arm
        choices = ", ".join(arm.value for arm in cls)
        raise ValueError(f"unknown arm {text!r}: expected one of {choices}")


ARMS: tuple[Arm, ...] = tuple(Arm)


def switchable_arms(envelope: bool) -> tuple[Arm, ...]:
    """The arms a loaded session can switch to live: every arm with the stock state envelope
    loaded, else only those under the state rule (the stock path needs the envelope)."""
    return tuple(arm for arm in ARMS if envelope or arm.state_rule)


@runtime_checkable
class ArmedStream(Protocol):
    """What an adapter's stream offers so arms can change between calls without losing exactness.

    ``set_arm`` takes effect at the next call. It moves the stream's state between the stock
    representation (fresh tensors, static envelopes) and the state-rule one (demand-sized regions,
    carries) by copying values, so the next call sees bit-identical inputs whichever arm it runs.
    """

    @property
    def arm(self) -> Arm: ...

    def set_arm(self, arm: Arm) -> None: ...

"""Every arm gives the conversation the same audio, bit for bit, also when switched live.

One espeak-ng conversation (two answers, the second interrupted) through a session per arm, then
one session whose arm changes between periods on request (as the GUI asks from its thread): the
assistant's PCM of every period equals the eager session's with ``np.array_equal``. On this CPU
the flow's replay is simulated (decisions, staging, aliasing) and the vocoder, which draws host
randomness here, is refused replay and runs eagerly in every arm; the GPU run replays both.
"""

from __future__ import annotations

import threading
from functools import cache

import numpy as np
import pytest
import torch

from app.converse import Tally, summarize
from app.session import build_session
from app.settings import Settings
from engine.arms import ARMS, Arm
from engine.cadence import CadenceStats
from engine.duplex import PeriodOutcome
from tests.speech import conversation

pytestmark = pytest.mark.usefixtures("one_thread")

TALK = (
    0.5,
    "hello there, how are you doing today",
    8.5,
    "what is the weather like tomorrow",
    1.5,
    "no wait, stop, stop talking please",
    2.0,
)


@cache
def periods() -> tuple[np.ndarray, ...]:
    return tuple(conversation(TALK).periods())


def converse(arm: Arm, switches: dict[int, Arm] | None = None) -> list[PeriodOutcome]:
    session = build_session(
        Settings(family="synthetic", device="cpu", model_size="small", arm=arm), n_steps=2
    )
    outcomes = []
    for k, mic in enumerate(periods()):
        if switches and k in switches:
            # Requested from another thread, as the GUI does; applied at the next period.
            asker = threading.Thread(target=session.request_arm, args=(switches[k],))
            asker.start()
            asker.join()
        outcomes.append(session.step(mic))
    session.close()
    return outcomes


@pytest.fixture(scope="module")
def eager() -> list[PeriodOutcome]:
    torch.set_num_threads(1)
    outcomes = converse(Arm.EAGER)
    turns = sum(c.kind == "flush" for o in outcomes for c in o.calls)
    barge_ins = sum(o.record.loop["barge_in"] for o in outcomes)
    assert turns >= 2 and barge_ins == 1, (turns, barge_ins)
    return outcomes


def unequal(reference: list[PeriodOutcome], outcomes: list[PeriodOutcome]) -> list[int]:
    assert len(reference) == len(outcomes)
    return [
        k
        for k, (a, b) in enumerate(zip(reference, outcomes, strict=True))
        if not np.array_equal(a.pcm, b.pcm)
    ]


def test_converse_and_the_live_panel_print_the_same_p95(eager: list[PeriodOutcome]) -> None:
    """One percentile function: ``converse``'s summary and the live panel's cadence summary
    (``CadenceStats``, whose window holds this whole run) agree on the same periods."""
    panel = CadenceStats()
    for outcome in eager:
        panel.update(outcome.record)
    shown = panel.summary()
    tally = Tally()
    for outcome in eager:
        tally.add(outcome)
    printed = summarize(tally)
    for key in ("p50", "p95"):
        value = shown[f"{key}_s"]
        assert isinstance(value, float) and printed[f"{key}_ms"] == round(value * 1e3, 2), key


@pytest.mark.parametrize("arm", [a for a in ARMS if a is not Arm.EAGER], ids=str)
def test_every_arm_gives_eagers_pcm(eager: list[PeriodOutcome], arm: Arm) -> None:
    outcomes = converse(arm)
    assert unequal(eager, outcomes) == [], f"{arm}: periods whose audio differs from eager"
    assert sum(np.abs(o.pcm).max() > 0 for o in outcomes) >= 6
    if arm.replay:
        hits = sum(o.record.replay["total"]["hits"] for o in outcomes)
        assert hits > 0, f"{arm}: the flow never replayed"


def test_live_arm_switches_keep_the_pcm(eager: list[PeriodOutcome]) -> None:
    order = [Arm.SRC, Arm.R, Arm.S, Arm.RC, Arm.EAGER, Arm.SR, Arm.SRC]
    switches = {k: order[i % len(order)] for i, k in enumerate(range(2, len(periods()), 2))}
    outcomes = converse(Arm.EAGER, switches)
    assert unequal(eager, outcomes) == []
    seen = {o.record.arm for o in outcomes}
    assert seen == {str(a) for a in ARMS}, seen
    switched = [e["detail"] for o in outcomes for e in o.record.events if e["kind"] == "arm_switch"]
    changes = [f"{outcomes[k - 1].record.arm} -> {arm}" for k, arm in switches.items()]
    assert switched == [c for c in changes if c.split(" -> ")[0] != c.split(" -> ")[1]]
    # A request made before period k applies at k's start: k's record carries the new arm.
    assert all(outcomes[k].record.arm == str(arm) for k, arm in switches.items())


@pytest.mark.gpu
def test_every_arm_gives_eagers_pcm_on_gpu() -> None:
    """Full-size Token2Wav on CUDA: flow and vocoder replayed (device randomness included)."""
    from app.demo import talk_periods  # espeak-free speech: the GPU machine has none
    from tests.gpu_results import record

    torch.backends.cudnn.deterministic = True
    talk = talk_periods(16, seed=0)

    def run(arm: Arm) -> list[PeriodOutcome]:
        session = build_session(
            Settings(family="synthetic", device="cuda", model_size="full", arm=arm)
        )
        outcomes = [session.step(mic) for mic in talk]
        session.close()
        return outcomes

    reference = run(Arm.EAGER)
    assert sum(o.phase.value == "speak" for o in reference) >= 4
    for arm in ARMS[1:]:
        outcomes = run(arm)
        bad = unequal(reference, outcomes)
        hifts = [o.record.replay.get("ops", {}).get("hift_chunk", {}) for o in outcomes]
        hits = sum(h.get("hits", 0) for h in hifts)
        record(f"duplex_pcm[{arm}]", periods=len(outcomes), exact=len(outcomes) - len(bad),
               hift_hits=hits)  # fmt: skip
        assert bad == [], f"{arm}: periods {bad} differ from eager"
        if arm.replay:
            assert hits > 0, f"{arm}: the vocoder never replayed"

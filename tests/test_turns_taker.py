"""TurnTaker on probability sequences: pause to answer, barge-in, hysteresis, holds."""

from __future__ import annotations

import pytest

from adapters.turns.taker import Floor, TurnEvent, TurnParams, TurnTaker

W = 512 / 16000  # seconds per window
PAUSE = 19  # ceil(0.6 / 0.032)
BARGE = 10  # ceil(0.3 / 0.032)


def feed(taker: TurnTaker, probs: list[float]) -> list[tuple[int, TurnEvent]]:
    """The (window index, event) of every event."""
    events = [(i, taker.update(p)) for i, p in enumerate(probs)]
    return [(i, e) for i, e in events if e is not TurnEvent.NONE]


def test_windows_round_up() -> None:
    params = TurnParams()
    assert params.windows(params.pause_s) == PAUSE
    assert params.windows(params.barge_in_s) == BARGE
    assert params.windows(0.064) == 2  # exact multiples do not gain a window


def test_answers_after_the_pause_not_before() -> None:
    taker = TurnTaker()
    events = feed(taker, [0.0] * 5 + [0.9] * 30 + [0.0] * 40)
    assert events == [(35 + PAUSE - 1, TurnEvent.TAKE)]
    assert taker.speaking and taker.floor is Floor.ASSISTANT


def test_a_short_gap_inside_speech_does_not_take_the_turn() -> None:
    taker = TurnTaker()
    events = feed(taker, [0.9] * 20 + [0.0] * (PAUSE - 1) + [0.9] * 20 + [0.0] * 5)
    assert events == [] and taker.floor is Floor.USER


def test_silence_alone_never_takes_the_turn() -> None:
    taker = TurnTaker()
    assert feed(taker, [0.0] * 200) == [] and taker.floor is Floor.IDLE


def test_a_click_earns_no_answer() -> None:
    taker = TurnTaker()  # min_speech_s 0.2 s = 7 windows
    assert feed(taker, [0.9] * 3 + [0.0] * 60) == []
    assert taker.floor is Floor.IDLE
    # ... and is forgotten: a later short blip does not add up with it.
    assert feed(taker, [0.9] * 4 + [0.0] * 60) == []


def test_hysteresis_keeps_speech_between_thresholds_voiced() -> None:
    taker = TurnTaker()
    feed(taker, [0.9] * 10)
    # 0.4 is below "on" but above "off": still speech, so no pause is counted.
    assert feed(taker, [0.4] * 60) == [] and taker.voiced
    # ... and from silence, 0.4 never becomes speech.
    fresh = TurnTaker()
    assert feed(fresh, [0.4] * 60) == [] and not fresh.voiced and fresh.floor is Floor.IDLE


def speaking_taker() -> TurnTaker:
    taker = TurnTaker()
    feed(taker, [0.9] * 20 + [0.0] * PAUSE)
    assert taker.speaking
    return taker


def test_barge_in_after_sustained_speech_only() -> None:
    taker = speaking_taker()
    assert feed(taker, [0.9] * (BARGE - 1) + [0.0] * 5) == [], "a short noise is no barge-in"
    events = feed(taker, [0.9] * (BARGE + 5))
    assert events == [(BARGE - 1, TurnEvent.BARGE_IN)]
    assert taker.floor is Floor.USER
    # The user finishes; after the pause the assistant answers again.
    assert feed(taker, [0.0] * PAUSE) == [(PAUSE - 1, TurnEvent.TAKE)]


def test_finish_gives_the_floor_back() -> None:
    taker = speaking_taker()
    taker.finish()
    assert taker.floor is Floor.IDLE and not taker.speaking
    assert feed(taker, [0.0] * 100) == [], "no answer without new speech"
    assert feed(taker, [0.9] * 10 + [0.0] * PAUSE)[0][1] is TurnEvent.TAKE


def test_finish_while_the_user_talks_counts_their_speech() -> None:
    taker = speaking_taker()
    feed(taker, [0.9] * 5)  # under the barge-in duration
    taker.finish()
    assert taker.floor is Floor.USER
    assert feed(taker, [0.9] * 5 + [0.0] * PAUSE) == [(5 + PAUSE - 1, TurnEvent.TAKE)]


def test_hold_defers_a_take_and_cancels_it_if_the_user_resumes() -> None:
    taker = TurnTaker()
    feed(taker, [0.9] * 20 + [0.0] * (PAUSE - 1))
    assert taker.update(0.0, hold=True) is TurnEvent.NONE
    assert taker.update(0.0) is TurnEvent.TAKE, "fires at the first window not held"
    resumed = TurnTaker()
    feed(resumed, [0.9] * 20 + [0.0] * (PAUSE - 1))
    assert resumed.update(0.0, hold=True) is TurnEvent.NONE
    assert resumed.update(0.9) is TurnEvent.NONE and resumed.floor is Floor.USER


def test_hold_latches_a_barge_in() -> None:
    taker = speaking_taker()
    for _ in range(BARGE):
        assert taker.update(0.9, hold=True) is TurnEvent.NONE
    for _ in range(10):
        assert taker.update(0.0, hold=True) is TurnEvent.NONE
    assert taker.update(0.0) is TurnEvent.BARGE_IN, "the user stopped, the interruption stands"
    assert feed(taker, [0.0] * PAUSE)[0][1] is TurnEvent.TAKE


def test_reset() -> None:
    taker = speaking_taker()
    taker.reset()
    assert taker.floor is Floor.IDLE and not taker.voiced


@pytest.mark.parametrize(
    "kwargs", [{"on": 0.3, "off": 0.5}, {"pause_s": 0.0}, {"barge_in_s": -1.0}, {"on": 1.5}]
)
def test_bad_params_name_the_constraint(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"need|must be"):
        TurnParams(**kwargs)

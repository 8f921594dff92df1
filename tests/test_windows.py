"""TokenWindower: the decoder's call pattern (flush at a turn's start, steady windows, last call).

MiniCPM-o 4.5: flush 8–28 tokens, steady 28-token windows at a 25-token stride, a last call with
every pending token. Lychee-FD: 13-token windows at a 10-token stride, flush 4–13. The numbers
come from the shipped declarations. Every token of a turn is synthesized exactly once as a new
token (the lookahead is sent again, never skipped).
"""

from __future__ import annotations

import pytest
import torch

from engine.windows import Call, CallKind, TokenWindower


def ids(start: int, n: int) -> torch.Tensor:
    return torch.arange(start, start + n, dtype=torch.int32).reshape(1, n)


MINICPM = {"stride": 25, "lookahead": 3, "flush_min": 8, "max_call": 28}


def minicpm() -> TokenWindower:
    """MiniCPM-o's windows (the declaration's, checked in the first test)."""
    return TokenWindower.from_declaration("minicpmo45_token2wav")


def kinds(calls: list[Call]) -> list[tuple[str, int, bool]]:
    return [(str(c.kind), c.tokens.shape[1], c.last_chunk) for c in calls]


def test_numbers_come_from_the_declarations() -> None:
    mini = TokenWindower.from_declaration("minicpmo45_token2wav")
    assert (mini.stride, mini.lookahead, mini.flush_min, mini.max_call) == (25, 3, 8, 28)
    lychee = TokenWindower.from_declaration("lycheefd_token2wav")
    assert (lychee.stride, lychee.lookahead, lychee.flush_min, lychee.max_call) == (10, 3, 4, 13)
    assert lychee.window == 13


def test_a_turn_is_flush_steady_last() -> None:
    w = minicpm()
    calls = w.push(ids(0, 28))  # a full first window
    calls += w.push(ids(28, 25))
    calls += w.push(ids(53, 25))
    calls += w.push(ids(78, 10), turn_end=True)
    assert kinds(calls) == [
        ("flush", 28, False),
        ("steady", 28, False),
        ("steady", 28, False),
        ("last", 13, True),
    ]
    # Each window starts where the previous one's lookahead starts: stride 25, overlap 3.
    starts = [int(c.tokens[0, 0]) for c in calls]
    assert starts == [0, 25, 50, 75]
    assert int(calls[-1].tokens[0, -1]) == 87
    assert not w.in_turn and w.pending == 0


def test_slow_tokens_wait_for_the_flush_minimum() -> None:
    w = minicpm()
    assert w.push(ids(0, 5)) == []
    assert w.in_turn
    calls = w.push(ids(5, 5))  # 10 pending >= 8: a flush of 10, 3 kept as lookahead
    assert kinds(calls) == [("flush", 10, False)]
    assert w.pending == 3
    assert w.push(ids(10, 20)) == []  # 23 < 28
    assert kinds(w.push(ids(30, 5))) == [("steady", 28, False)]


def test_a_burst_is_cut_into_windows_of_at_most_max_call() -> None:
    w = minicpm()
    calls = w.push(ids(0, 90))
    assert kinds(calls) == [("flush", 28, False), ("steady", 28, False), ("steady", 28, False)]
    assert w.pending == 90 - 75
    calls = w.push(ids(90, 40), turn_end=True)  # 55 pending: 55 -> 30 -> 5, then the last
    assert kinds(calls) == [("steady", 28, False), ("steady", 28, False), ("last", 5, True)]
    assert all(c.tokens.shape[1] <= 28 for c in calls)


def test_turn_end_sends_what_fits_one_call_as_the_last_call() -> None:
    w = minicpm()
    w.push(ids(0, 28))
    # 3 lookahead + 25 new = 28: one last call, not a steady window and a last call of 3.
    assert kinds(w.push(ids(28, 25), turn_end=True)) == [("last", 28, True)]


def test_barge_in_flushes_the_lookahead_as_the_last_call() -> None:
    w = minicpm()
    w.push(ids(0, 28))
    w.push(ids(28, 25))
    calls = w.push(ids(0, 0), turn_end=True)
    assert kinds(calls) == [("last", 3, True)]
    assert calls[0].tokens.tolist() == [[50, 51, 52]]


def test_a_short_turn_is_one_last_call_and_an_empty_turn_none() -> None:
    w = minicpm()
    assert kinds(w.push(ids(0, 20), turn_end=True)) == [("last", 20, True)]
    assert w.push(ids(0, 0), turn_end=True) == []
    assert w.push(ids(0, 0)) == []


def test_lychee_windows_are_13_at_a_stride_of_10() -> None:
    w = TokenWindower.from_declaration("lycheefd_token2wav")
    calls = w.push(ids(0, 28))
    calls += w.push(ids(28, 25), turn_end=True)
    assert kinds(calls) == [
        ("flush", 13, False),
        ("steady", 13, False),
        ("steady", 13, False),
        ("steady", 13, False),
        ("last", 13, True),
    ]
    assert [int(c.tokens[0, 0]) for c in calls] == [0, 10, 20, 30, 40]
    new = sum(c.tokens.shape[1] - (0 if c.last_chunk else 3) for c in calls)
    assert new == 53  # every token once as a new token


def test_windows_are_fresh_tensors_on_the_tokens_device() -> None:
    w = minicpm()
    source = ids(0, 28)
    (call,) = w.push(source)
    source.zero_()
    assert int(call.tokens[0, 1]) == 1 and call.tokens.dtype == torch.int32
    # Canonical strides whatever the buffer's width: strides are part of replay signatures.
    calls = minicpm().push(ids(0, 90)) + minicpm().push(ids(0, 20), turn_end=True)
    assert all(c.tokens.stride() == (c.tokens.shape[1], 1) for c in calls)
    assert call.kind is CallKind.FLUSH and call.info.to_dict()["kind"] == "flush"


@pytest.mark.parametrize(
    "args", [{"stride": 0}, {"flush_min": 2}, {"max_call": 20}, {"flush_min": 30}]
)
def test_impossible_windows_are_refused(args: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"from_declaration|stride"):
        TokenWindower(**{**MINICPM, **args})

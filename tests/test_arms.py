"""The ablation arms: their flags follow engine/arms.py's table; names parse as users type them."""

from __future__ import annotations

import pytest

from engine.arms import ARMS, Arm, Granularity


@pytest.mark.parametrize(
    ("arm", "state_rule", "granularity"),
    [
        (Arm.EAGER, False, None),
        (Arm.S, True, None),
        (Arm.R, False, Granularity.STEP),
        (Arm.RC, False, Granularity.CHUNK),
        (Arm.SR, True, Granularity.STEP),
        (Arm.SRC, True, Granularity.CHUNK),
    ],
)
def test_flags_follow_the_design_table(
    arm: Arm, state_rule: bool, granularity: Granularity | None
) -> None:
    assert arm.state_rule is state_rule
    assert arm.granularity is granularity
    assert arm.replay is (granularity is not None)


@pytest.mark.parametrize("text", ["SRc", "src", "SRC", " srC "])
def test_parse_is_case_insensitive(text: str) -> None:
    assert Arm.parse(text) is Arm.SRC


def test_parse_names_the_choices() -> None:
    with pytest.raises(ValueError, match="eager, S, R, Rc, SR, SRc"):
        Arm.parse("RS")


def test_six_arms_in_table_order() -> None:
    assert [str(arm) for arm in ARMS] == ["eager", "S", "R", "Rc", "SR", "SRc"]

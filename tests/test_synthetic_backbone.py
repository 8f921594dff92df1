"""SyntheticBackbone on real espeak-ng speech: listens, answers at the token clock, yields.

How long a period takes is bench/converse.py's figure (its stages_ms.backbone), not a test's.
"""

from __future__ import annotations

import pytest
import torch

from adapters.synthetic import SyntheticBackbone
from engine.declaration_io import load_declaration
from engine.duplex import Phase
from engine.windowed import Backbone, BackboneStep
from tests.speech import Conversation, conversation

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTION = "hello, how are you today? tell me about the weather."
INTERRUPTION = "no wait, stop, I have another question"


_POINT = load_declaration("minicpmo45_token2wav").values()
DECLARED = {  # MiniCPM-o's clocks: 25 tokens a 1-s period
    "period_s": 1.0,
    "tokens_per_s": _POINT["stride_tokens"],
    "lookahead": _POINT["lookahead"],
    "vocab": _POINT["vocab"],
}


def backbone_of(**kwargs: object) -> SyntheticBackbone:
    """A backbone at MiniCPM-o's declared clocks, with ``kwargs`` changed."""
    return SyntheticBackbone(**{**DECLARED, **kwargs})  # type: ignore[arg-type]


def run(backbone: SyntheticBackbone, talk: Conversation) -> list[BackboneStep]:
    return [backbone.step(mic) for mic in talk.periods(backbone.period_s)]


def speaking(steps: list[BackboneStep]) -> list[int]:
    return [k for k, s in enumerate(steps) if s.phase is Phase.SPEAK]


def test_conforms_to_the_backbone_protocol() -> None:
    backbone: Backbone = backbone_of()
    assert backbone.period_s == 1.0 and backbone.input_rate == 16000


def test_listens_then_answers_at_the_token_clock() -> None:
    talk = conversation([0.5, QUESTION, 10.0])
    steps = run(backbone_of(seed=0), talk)
    ((_, end),) = talk.speech
    spoken = speaking(steps)
    first, last = spoken[0], spoken[-1]
    # The answer starts after a pause of 0.6 s (+ the VAD's release, ~0.1 s), not before.
    assert first <= end + 0.8 and first + 1 >= end + 0.6
    assert spoken == list(range(first, last + 1)), "one contiguous turn"
    for k, step in enumerate(steps):
        assert step.tokens.dtype == torch.int32 and step.tokens.shape[0] == 1
        if k not in spoken:
            assert step.tokens.shape[1] == 0 and not step.turn_end
    counts = [steps[k].tokens.shape[1] for k in spoken]
    assert counts[0] == 28 and all(c == 25 for c in counts[1:-1]) and 1 <= counts[-1] <= 25
    assert 75 <= sum(counts) <= 200, "answers are 3-8 s of tokens"
    assert [k for k, s in enumerate(steps) if s.turn_end] == [last]
    assert not any(s.barge_in for s in steps)
    tokens = torch.cat([steps[k].tokens for k in spoken], 1)
    assert int(tokens.min()) >= 0 and int(tokens.max()) < 6561
    assert len(set(tokens.flatten().tolist())) > 20, "sampled, not a constant"
    assert max(s.voice_prob for s in steps[: int(end)]) > 0.9
    assert all(s.voice_prob < 0.1 for s in steps[first:])


def test_stops_at_once_on_barge_in_and_answers_again() -> None:
    talk = conversation([0.5, QUESTION, 1.5, INTERRUPTION, 9.0])
    steps = run(backbone_of(seed=0), talk)
    _, (start_b, end_b) = talk.speech
    barged = [k for k, s in enumerate(steps) if s.barge_in]
    assert len(barged) == 1
    k = barged[0]
    step = steps[k]
    assert step.turn_end and step.phase is Phase.LISTEN and step.tokens.shape[1] == 0
    assert k <= start_b + 0.4 and k + 1 >= start_b + 0.3, "0.3 s of speech interrupts"
    assert steps[k - 1].phase is Phase.SPEAK
    # The user finishes the interruption; after the pause the assistant answers it.
    second = [j for j in speaking(steps) if j > k]
    assert second and second[0] + 1 >= end_b + 0.6 and second[0] <= end_b + 0.8
    assert steps[second[0]].tokens.shape[1] == 28
    assert steps[second[-1]].turn_end and not steps[second[-1]].barge_in


def test_deterministic_and_never_touches_the_global_rng() -> None:
    talk = conversation([0.5, QUESTION, 1.5, INTERRUPTION, 9.0])
    before = torch.random.get_rng_state()
    backbone = backbone_of(seed=3)
    first = run(backbone, talk)
    second = run(backbone_of(seed=3), talk)
    backbone.reset()
    third = run(backbone, talk)
    assert torch.equal(torch.random.get_rng_state(), before)
    for a, b, c in zip(first, second, third, strict=True):
        assert (a.phase, a.turn_end, a.barge_in) == (b.phase, b.turn_end, b.barge_in)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.tokens, c.tokens)
        assert a.voice_prob == b.voice_prob == c.voice_prob
    other = run(backbone_of(seed=4), talk)
    spoken = speaking(first)
    assert not torch.equal(first[spoken[0]].tokens, other[spoken[0]].tokens), "seed matters"


def test_a_turns_tokens_depend_on_seed_and_turn_only() -> None:
    """Turn 0 says the same whenever it starts: timing does not leak into the tokens."""
    early = run(backbone_of(), conversation([0.2, "yes", 9.0]))
    late = run(backbone_of(), conversation([2.5, QUESTION, 9.0]))
    a, b = early[speaking(early)[0]], late[speaking(late)[0]]
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"input_rate": 44100}, "resample the microphone"),
        ({"tokens_per_s": 25, "period_s": 0.5}, "whole number of tokens"),
        ({"answer_s": (5.0, 2.0)}, "shortest <= longest"),
    ],
)
def test_bad_arguments_name_the_fix(kwargs: dict[str, object], fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        backbone_of(**kwargs)

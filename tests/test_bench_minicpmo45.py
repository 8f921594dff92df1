"""bench/minicpmo45.py's arithmetic: response latency from the talk's schedule, agreement of
two runs unit by unit with the first divergence, and where the demo talk's utterances end; its
stage clock puts back exactly what it wrapped."""

from __future__ import annotations

from typing import Any

import pytest

from bench.minicpmo45 import StageClock, agreement, response_latency, speech_ends


def unit(text: list[int], speech: list[int], pcm: bytes = b"\x00") -> dict[str, Any]:
    return {"text": text, "speech": speech, "pcm": pcm}


def test_latency_waits_for_the_unit_then_for_its_work_and_for_the_backlog() -> None:
    # Unit k's second is in at k + 1 s. Utterance ends at 0.4 s: unit 0 (in at 1 s) does not
    # speak, unit 1 (in at 2 s, 0.3 s of work) does: 2.3 - 0.4. Ends at 2.5 s: units 2 and 3
    # take 1.5 s each, so unit 3 starts at 4.5 (not 4) and speaks at 6.0: 6.0 - 2.5.
    latencies = response_latency([0.2, 0.3, 1.5, 1.5], [False, True, False, True], [0.4, 2.5])
    assert latencies == pytest.approx([1.9, 3.5])


def test_latency_skips_an_utterance_never_answered_within_the_units() -> None:
    assert response_latency([0.2, 0.2], [True, False], [1.5]) == []


def test_agreement_counts_each_output_and_names_the_first_divergence() -> None:
    reference = [unit([1, 2, 3], [7, 8]), unit([4], [9]), unit([5], [6])]
    run = [unit([1, 2, 3], [7, 8]), unit([4], [9, 0]), unit([5, 1], [6], b"\x01")]
    result = agreement(run, reference)
    assert result["equal"] == {"text": 2, "speech": 2, "pcm": 2, "all": 1}
    assert result["first_divergence"] == {"unit": 1, "what": "speech", "index": 1}
    assert agreement(reference, reference)["first_divergence"] is None


def test_speech_ends_follow_the_demo_schedule() -> None:
    ends = speech_ends(40, seed=0)
    assert ends == sorted(ends) and len(ends) >= 3
    assert 0.5 < ends[0] < 5 and ends[-1] < 40
    assert speech_ends(40, seed=0) == ends != speech_ends(40, seed=1)


def test_the_stage_clock_puts_back_what_it_wrapped_even_after_a_switch() -> None:
    """The unclocked pass runs the code that was there: a class's method again where the
    duplex object had none of its own, the instance's own function where it had one (the
    family's rules), and what a switch installed over a wrapper, wrapped in turn, is kept."""

    class Part:
        def feed(self) -> str:
            return "class"

    class Duplex:
        def __init__(self) -> None:
            self.model = Part()
            self.model.tts = Part()
            self.decoder = Part()

        def streaming_prefill(self) -> str:
            return "prefill"

        def streaming_generate(self) -> str:
            return "generate"

    duplex = Duplex()
    duplex.model.get_audio_embedding_streaming = lambda: "audio"
    duplex.model.tts.generate_chunk = lambda: "tts"
    rules_feed = lambda: "rules"  # noqa: E731 (an instance's own function, as the rules install)
    duplex.decoder.feed = rules_feed
    duplex.decoder.decode = lambda: "decode"
    clock = StageClock(duplex, cuda=False)
    clock.install()
    clock.install()  # idempotent
    assert duplex.decoder.feed() == "rules" and duplex.decoder.feed is not rules_feed
    switched = lambda: "switched"  # noqa: E731 (another arm's code, over the wrapper)
    duplex.decoder.feed = switched
    clock.install()
    assert duplex.decoder.feed() == "switched" and clock.take()["llm_prefill"] > 0.0
    clock.uninstall()
    assert duplex.decoder.feed is switched
    assert "streaming_prefill" not in vars(duplex) and duplex.streaming_prefill() == "prefill"
    assert duplex.model.tts.generate_chunk() == "tts" and duplex.decoder.decode() == "decode"
    clock.uninstall()  # nothing left to put back
    assert duplex.decoder.feed is switched

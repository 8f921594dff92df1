"""The minicpmo45 period loop against a stand-in with the published duplex API.

The stand-in (:mod:`tests.minicpmo45_standin`) is the one fake, at the model's boundary: what
``model.as_duplex(...)`` returns in the checkpoint's code. Everything of ours is real: the
backbone and its hand-off, the vendor's call rule (:class:`DuplexWindower`), our small Token2Wav
under the arm, the loop. The promises checked:

* the tokens our decoder gets are the ones the duplex object hands over, cut into exactly the
  calls its own Token2wav would get (windows, ``last_chunk``, resets), for both vendor variants
  (``force_flush`` at turn starts, or every unit);
* the PCM equals feeding those vendor calls, with the vendor's resets, to our decoder directly
  (with ``tests/oracle``'s flow and HiFT equalities, the PCM the vendor's decoder makes);
* text, phases and turn ends come through; barge-in goes through the break event; a new
  conversation through the session stop and ``prepare``;
* the vendor's Token2wav is never called (the hand-off replaces it).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from adapters.face import ModelRequest
from adapters.minicpmo45.backbone import DuplexBackbone
from adapters.minicpmo45.family import period_model
from adapters.minicpmo45.windows import SILENCE_TOKEN
from adapters.token2wav.family import SYNTHETIC, SpeechModel
from engine.arms import Arm
from engine.duplex import DuplexLoop, PeriodStep, Phase
from engine.metrics import Metrics
from engine.windowed import WindowedSynthesis
from tests.minicpmo45_standin import LISTEN, StandInDuplex, Unit, speak

# Two turns and a half: silence first, a turn that starts short and ends mid-window, a turn
# whose first unit is under the flush threshold (2 tokens), one ending on an exact window, and
# an end with no tokens at all.
SCRIPT = [
    LISTEN,
    LISTEN,
    speak(20, "Hello"),
    speak(25, " there,"),
    speak(25, " how"),
    speak(11, " are you?", end=True),
    LISTEN,
    speak(2, "I"),
    speak(25, " am"),
    speak(25, " fine", end=True),
    speak(25, "And"),
    speak(0, "", end=True),
    LISTEN,
]
UNITS = len(SCRIPT)


def _speech(arm: Arm = Arm.EAGER, seed: int = 0) -> SpeechModel:
    request = ModelRequest(device="cpu", model_size="small", arm=arm, seed=seed, n_steps=2)
    return SYNTHETIC.load_speech(request, lambda stage, fraction: None)


def _request(arm: Arm = Arm.EAGER) -> ModelRequest:
    return ModelRequest(device="cpu", model_size="small", arm=arm, n_steps=2)


def _mic(k: int) -> np.ndarray:
    return np.random.default_rng(k).normal(0.0, 0.05, 16000).astype(np.float32)


def _run(model: WindowedSynthesis, units: int) -> list[PeriodStep]:
    return [model.step(_mic(k)) for k in range(units)]


def _vendor_calls(script: list[Unit], flush_every_unit: bool) -> list[tuple[list[int], bool]]:
    """What the stand-in's vendor windowing sends its Token2wav for the same token stream."""
    alone = StandInDuplex(script, seed=5, flush_every_unit=flush_every_unit)
    for k in range(len(script)):
        alone.streaming_prefill(_mic(k))
        alone.streaming_generate()
    return alone.vendor_calls


class _Recorder:
    """Our decoder with every call it gets written down (tokens, last_chunk, resets after)."""

    def __init__(self, speech: SpeechModel) -> None:
        self.inner, self.calls, self.resets = speech.speech, [], 0
        self.calls: list[tuple[list[int], bool]]

    @property
    def arm(self) -> Arm:
        return self.inner.arm

    def set_arm(self, arm: Arm) -> None:
        self.inner.set_arm(arm)

    def push(self, tokens: torch.Tensor, last_chunk: bool = False) -> torch.Tensor:
        self.calls.append((tokens.reshape(-1).tolist(), last_chunk))
        return self.inner.push(tokens, last_chunk)

    def reset(self) -> None:
        self.resets += 1
        self.inner.reset()


@pytest.mark.parametrize("flush_every_unit", [False, True], ids=["public", "unified"])
def test_our_decoder_gets_exactly_the_vendor_calls(flush_every_unit: bool) -> None:
    standin = StandInDuplex(SCRIPT, seed=5, flush_every_unit=flush_every_unit)
    model = period_model(_speech(), standin, _request())
    recorder = _Recorder(_speech())
    model.synthesizer = recorder
    steps = _run(model, UNITS)
    expected = _vendor_calls(SCRIPT, flush_every_unit)
    assert recorder.calls == expected
    assert recorder.resets == sum(last for _, last in expected) == 3
    assert all(window[:3] == [SILENCE_TOKEN] * 3 for window, _ in _turn_starts(expected))
    assert standin.vendor_calls == []  # the hand-off replaced the vendor's Token2wav
    assert [s.turn_end for s in steps] == [u.end_of_turn for u in SCRIPT]
    assert [s.phase for s in steps] == [
        Phase.LISTEN if u.tokens is None else Phase.SPEAK for u in SCRIPT
    ]
    assert "".join(s.text for s in steps) == "".join(u.text for u in SCRIPT)
    assert standin.heard == [16000] * UNITS


def _turn_starts(calls: list[tuple[list[int], bool]]) -> list[tuple[list[int], bool]]:
    starts, fresh = [], True
    for call in calls:
        if fresh:
            starts.append(call)
        fresh = call[1]
    return starts


def test_the_vendor_rule_differs_from_the_one_flush_per_turn_pattern() -> None:
    """Why the family has its own windower: a short first unit waits for a whole window, an
    end with nothing new still sends the pending lookahead; the unified code flushes every unit,
    so its ends are a flush and the lookahead."""
    calls = _vendor_calls(SCRIPT, flush_every_unit=False)
    sizes = [(len(window), last) for window, last in calls]
    assert sizes == [
        (23, False), (28, False), (28, False), (14, True),  # 3 + 20 flushed at once; 3 + 11 last
        (28, False), (28, False), (5, True),  # 3 + 2 is under 8: it waits for a whole window
        (28, False), (3, True),  # "And", then an end with no tokens: the lookahead alone
    ]  # fmt: skip
    unified = [(len(w), last) for w, last in _vendor_calls(SCRIPT, flush_every_unit=True)]
    assert unified[:5] == [(23, False), (28, False), (28, False), (14, False), (3, True)]


@pytest.mark.parametrize("arm", [Arm.EAGER, Arm.SRC])
def test_the_pcm_equals_the_vendor_calls_through_our_decoder(arm: Arm) -> None:
    torch.manual_seed(0)
    model = period_model(_speech(arm), StandInDuplex(SCRIPT, seed=5), _request(arm))
    ours = torch.cat([torch.cat(list(s.audio), 1) for s in _run(model, UNITS) if s.audio], 1)
    torch.manual_seed(0)
    direct = _speech(Arm.EAGER).speech
    pieces = []
    with torch.no_grad():
        for window, last in _vendor_calls(SCRIPT, flush_every_unit=False):
            pieces.append(direct.push(torch.tensor([window], dtype=torch.int32), last))
            if last:
                direct.reset()
    expected = torch.cat(pieces, 1)
    assert ours.shape == expected.shape
    assert torch.equal(ours, expected)


def test_the_loop_runs_the_unit_at_1_s_16_khz_in_24_khz_out() -> None:
    model = period_model(_speech(Arm.SRC), StandInDuplex(SCRIPT, seed=5), _request(Arm.SRC))
    assert (model.period_s, model.input_rate, model.output_rate) == (1.0, 16000, 24000)
    loop = DuplexLoop(model, Metrics(model.period_s, device="cpu", arm="SRc"), None, None)
    outcomes = [loop.step(_mic(k)) for k in range(6)]
    assert all(o.pcm.shape == (24000,) for o in outcomes)
    assert outcomes[2].text == "Hello" and outcomes[2].record.loop["text"] == "Hello"
    assert outcomes[5].record.loop["turn_end"]


def test_barge_in_goes_through_the_break_event_and_ends_our_turn() -> None:
    script = [speak(25, "a"), speak(25, "b"), speak(25, "c"), LISTEN, speak(25, "d")]
    standin = StandInDuplex(script, seed=5)
    model = period_model(_speech(), standin, _request())
    recorder = _Recorder(_speech())
    model.synthesizer = recorder
    backbone = model.backbone
    assert isinstance(backbone, DuplexBackbone)
    model.step(_mic(0))
    assert model.in_turn
    backbone.interrupt()
    cut = model.step(_mic(1))
    assert cut.turn_end and cut.barge_in and cut.phase is Phase.LISTEN
    assert [e for e, _ in standin.events][-2:] == ["set_break_event", "clear_break_event"]
    assert standin.heard == [16000]  # the vendor skips prefill while its break event is set
    assert recorder.calls[-1] == (recorder.calls[0][0][-3:], True)  # the lookahead, last
    assert recorder.resets == 1 and not model.in_turn
    after = model.step(_mic(2))  # the vendor's next unit: a new turn for our decoder
    assert not after.barge_in
    assert recorder.calls[-1][0][:3] == [SILENCE_TOKEN] * 3


def test_an_interrupt_while_listening_ends_nothing() -> None:
    standin = StandInDuplex([LISTEN], seed=5)
    model = period_model(_speech(), standin, _request())
    assert isinstance(model.backbone, DuplexBackbone)
    model.backbone.interrupt()
    step = model.step(_mic(0))
    assert not step.turn_end and not step.barge_in and step.calls == ()


def test_a_new_conversation_stops_the_session_and_prepares_again() -> None:
    standin = StandInDuplex([speak(25, "a")], seed=5)
    model = period_model(_speech(), standin, _request())
    model.step(_mic(0))
    assert standin.model.audio_past_key_values == [16000]
    model.reset()
    names = [e for e, _ in standin.events]
    assert names == ["prepare", "set_session_stop", "prepare"]
    # the model's session reset before each prepare: the audio encoder's cache is not carried
    # from one conversation into the next (the vendor's prepare alone keeps it)
    assert standin.model.resets == 2 and standin.model.audio_past_key_values is None
    assert not model.in_turn
    prefix, suffix, ref_audio = standin.events[-1][1]
    assert prefix.startswith("<|im_start|>system\n") and suffix == "<|im_end|>"
    assert ref_audio is None
    step = model.step(_mic(1))
    assert step.calls[0].tokens == 28  # the silence prefix again, then 25 tokens


def test_loading_the_decoder_pins_cudnn_to_deterministic_algorithms() -> None:
    """On a GPU, cuDNN may run the vocoder's transposed convolutions with an atomics-based
    kernel: the H200 run gave other PCM for the same speech tokens, eager against eager. The
    decoder's load pins the flag (checked here without a GPU: it is a process setting)."""
    saved = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = False
    try:
        _speech()
        assert torch.backends.cudnn.deterministic
    finally:
        torch.backends.cudnn.deterministic = saved


def test_a_voice_recording_is_the_llms_reference_audio(tmp_path: object) -> None:
    import soundfile

    path = tmp_path / "voice.wav"  # type: ignore[operator]
    soundfile.write(str(path), np.full(48000, 0.1, dtype=np.float32), 48000)
    standin = StandInDuplex([LISTEN], seed=5)
    period_model(_speech(), standin, dataclasses.replace(_request(), voice=path))
    prefix, suffix, ref_audio = standin.events[0][1]
    assert prefix.endswith("<|audio_start|>") and suffix == "<|audio_end|><|im_end|>"
    assert ref_audio.dtype == np.float32 and ref_audio.shape == (16000,)


def test_two_hand_offs_in_one_unit_are_refused() -> None:
    standin = StandInDuplex([speak(5)], seed=5)
    model = period_model(_speech(), standin, _request())
    take = standin._generate_waveform_from_tokens

    def twice() -> dict[str, object]:
        take(torch.zeros(1, 2, 1, dtype=torch.long), None)
        take(torch.zeros(1, 2, 1, dtype=torch.long), None)
        return {"is_listen": False, "text": "", "end_of_turn": False}

    standin.streaming_generate = twice  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="handed speech tokens over 2 times"):
        model.step(_mic(0))


def test_code_without_the_hand_off_method_is_refused() -> None:
    from adapters.face import FamilyError

    class Renamed(StandInDuplex):
        _generate_waveform_from_tokens = None  # type: ignore[assignment]

    with pytest.raises(FamilyError, match="no _generate_waveform_from_tokens"):
        period_model(_speech(), Renamed([LISTEN]), _request())

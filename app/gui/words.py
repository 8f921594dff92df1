"""The window's plain words: what each arm means, and the Help page, for a person who has not
read the paper. One place, so the toolbar, the settings dialog and Help say the same thing."""

from __future__ import annotations

from adapters.registry import family
from app.audio.echo import HEADPHONES_HINT
from engine.arms import Arm
from engine.declaration_io import load_declaration

__all__ = [
    "ABOUT_HTML",
    "ARM_WORDS",
    "CASCADE_NOTE",
    "CPU_NOTE",
    "HEADPHONES",
    "HELP_HTML",
    "NO_ARMS",
    "NO_TEXT",
    "NO_WORDS",
    "REASON_WORDS",
    "TRANSCRIPT_PLACEHOLDER",
    "reason_words",
]

ARM_WORDS = {
    Arm.EAGER: "the stock way: memory as the model allocates it, every step launched",
    Arm.S: "lean state: memory sized to need, state carried, nothing replayed",
    Arm.R: "one graph per solver step, stock memory",
    Arm.RC: "one graph per chunk, stock memory",
    Arm.SR: "lean state, one graph per solver step",
    Arm.SRC: "lean state, one graph per chunk (default)",
}

# Why an operator call ran directly instead of replaying (engine.replay's miss reasons).
REASON_WORDS = {
    "disabled": "replay is off (this arm, or switched off)",
    "unkeyable": "its inputs cannot be matched to a graph",
    "not_in_catalog": "not planned ahead from the declaration",
    "foreign_device": "its data is on another device",
    "warmup": "warming up before its graph is recorded",
    "sealed": "new after recording closed",
    "drift": "its inputs changed shape or place",
    "unstable_address": "its memory moves between calls",
    "host_randomness": "it draws random numbers on the CPU",
    "fallback": "its graph failed, run directly instead",
    "broken": "its random generator could not be restored",
}


def reason_words(reason: str) -> str:
    """A miss reason in plain words (the code itself when it is new)."""
    return REASON_WORDS.get(reason, reason.replace("_", " "))


NO_ARMS = "none: this model replays nothing, so arms do not apply"

HEADPHONES = HEADPHONES_HINT  # the audio package states it; the banner and Help show it

TRANSCRIPT_PLACEHOLDER = (
    "What you and the assistant say appears here as you talk, for models that produce text "
    "(yours where the model runs a speech recognizer). A model that speaks without text leaves "
    "it empty."
)
NO_TEXT = (
    "This model speaks without text: nothing to show here. The charts (Engine tab) show how it "
    "runs."
)
NO_WORDS = (
    "Random weights speak no words: the assistant's text would be meaningless token numbers, "
    "so it is not shown. Choose a checkpoint in Settings to read what it says."
)

CASCADE_NOTE = (
    "Basic voice: a cascade (speech recognizer → small language model → voice) that answers "
    "when you pause, not a full-duplex model. For the real thing, download Moshi or "
    "MiniCPM-o 4.5 in Settings → Models (they need a GPU)."
)

CPU_NOTE = (
    "On the CPU no graphs are launched: the engine still decides, call by call, what it would "
    "replay and counts it, but runs every call directly. The replay and capture counts show "
    "those decisions; the speed-up they bring needs a GPU."
)


def _periods() -> str:
    """The native periods in words, from the declarations: the Token2Wav voices' speaking unit
    and Moshi's frame."""
    speech = load_declaration(family("synthetic").declaration)
    values = speech.values()
    unit_s = values["period_tokens"] / speech.clock_rate("token", values)
    moshi = load_declaration(family("moshi").declaration)
    frame_ms = 1000 / moshi.clock_rate("frame", moshi.values())
    return f"{unit_s:g} s of audio for the Token2Wav voices, {frame_ms:g} ms for Moshi"


_ARM_ROWS = "".join(f"<tr><td><b>{arm.value}</b></td><td>{ARM_WORDS[arm]}</td></tr>" for arm in Arm)

HELP_HTML = f"""
<h2>DuplexCadence</h2>
<p>A voice assistant you talk with as on the phone: it listens while it speaks, and you can
interrupt it. Behind it runs the DuplexCadence engine, which the charts let you watch.</p>

<h3>Talking</h3>
<p>Press <b>Start</b> (F5). The model loads, then listens; the next Start with the same
model and settings keeps it loaded and begins at once. Speak; when you pause, it answers.
Speak over it to interrupt. <b>Esc</b> or F5 stops. With push-to-talk (Settings) the model hears
you only while you hold <b>Space</b> or the Talk button; the microphone meter is then empty
while nothing is held, because the model hears nothing.</p>
<p>No model downloaded? The <b>basic voice</b> answers: a speech recognizer, a small language
model and a voice in a row, on the CPU. It waits for you to pause, so it is not full duplex;
Settings &rarr; Models downloads Moshi or MiniCPM-o 4.5 for the real thing, or a larger
recognizer and reply model for the basic voice (its checkpoint folder: one model's folder, or a
folder holding both; they want a GPU). A full-duplex
family without its checkpoint has <b>random weights</b>: it runs exactly like the real one but
its "speech" is noise, played 20 dB quieter. Choose a checkpoint in Settings for speech.
File &rarr; <i>Use a WAV file as the microphone</i> plays a recording to the model instead of
your voice.</p>

<p>The conversation fills the middle of the window, both sides as they are said; it is saved
beside the session's trace as it goes. The <b>Engine</b> tab shows the charts.</p>

<h3>Speakers and headphones</h3>
<p>{HEADPHONES}</p>

<h3>Safe listening</h3>
<p>Volume and Mute act at once. A limiter keeps every played sample below -1 dBFS, whatever
the model produces. The <b>LIMIT</b> lamp lights when it had to turn the voice down; the
<b>CLIP</b> lamp lights when your microphone reached full scale (lower the gain). Both stay lit
until you click them.</p>

<h3>Period and budget</h3>
<p>The model works in fixed slices of time called <b>periods</b> ({_periods()}). Each period
must be computed in less time than it lasts, or the voice stutters: that limit is the
<b>budget</b>, the red dashed line on the first chart.
<b>Headroom</b> says how many times faster than real time the engine runs (above 1&times; is
real time). <b>Response</b> is the time from the end of your speech to the assistant's first
sound. <b>Dropouts</b> count moments the speaker ran dry.</p>

<h3>Arms</h3>
<p>The paper asks which of two ideas makes the engine fast, so the engine can run with either,
both or neither; each combination is an <b>arm</b>. You can switch arms while talking: the
voice is the same bit for bit, only the speed and memory change, and every chart marks the
switch with a yellow line.</p>
<ul>
<li><b>S &mdash; the state rule</b> (lean state): the model's memory is sized to what it needs
and carried from one period to the next instead of being rebuilt.</li>
<li><b>R &mdash; replay</b>: the GPU work of a step is recorded once as a <i>graph</i> and
replayed, instead of being launched call by call. <b>c</b> means one graph per chunk of audio
rather than one per solver step.</li>
</ul>
<table cellspacing="6">{_ARM_ROWS}</table>

<h3>Replay, captures and the CPU</h3>
<p>The second chart counts the model's operator calls per period: <b>replayed</b> from a graph,
or run <b>eagerly</b> (directly), with the reason. The third counts graphs <b>captured</b>
(recorded) and <b>invalidated</b> (thrown away because something they relied on changed).
A healthy GPU session captures at the start and then only replays.</p>
<p>{CPU_NOTE}</p>

<h3>Exporting</h3>
<p>Export (Ctrl+E) writes the session's trace (open the .json in ui.perfetto.dev), a CSV of the
periods, both audio channels as WAV, and the transcript.</p>

<h3>The paper</h3>
<p><i>DuplexCadence: Exact State and Execution from a Speech Model's Declared Timelines.</i>
Speech models run on several clocks at once (audio frames, text tokens, diffusion steps) and
keep a bounded memory of the conversation. Because both are declared in the model's
configuration, the engine can plan memory and replay ahead of time, without changing a single
output sample. The arms let you see each half of that claim on your own machine.</p>

<h3>Keys</h3>
<p>F5 start/stop &middot; Esc stop &middot; Space push-to-talk &middot; Ctrl+, settings
&middot; Ctrl+E export &middot; F1 this page &middot; Ctrl+Q quit.</p>
"""

ABOUT_HTML = """
<h3>DuplexCadence</h3>
<p>A desktop full-duplex voice assistant whose speech models run under the DuplexCadence
runtime: exact state and execution from a speech model's declared timelines.</p>
<p>Built with PySide6, pyqtgraph and PyTorch.</p>
"""

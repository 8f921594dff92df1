"""Screenshot of the running app: a WAV-fed conversation with arm switches, then a PNG.

``scripts/screenshot.sh`` runs this under Xvfb (CI has no display); any display works:

    python -m app.gui.screenshot --out docs/screenshot.png [--input-wav talk.wav]

Without ``--input-wav`` the user's side is spoken by ``espeak-ng`` (two questions with pauses,
then an interruption), paced in real time like a microphone. The model is the small Token2Wav on
the CPU with seeded random weights, so the banner says the audio is not speech — as it should.
The run switches the arm to eager and back to SRc so the charts (the Engine tab, shown for this
shot) show both switches, and shoots while the assistant is speaking. Settings, traces and
geometry go to a temporary folder.

The README's picture of a conversation with its transcript (``docs/screenshot-transcript.png``)
is the basic voice on the shipped demo talk, shot once both sides are in the transcript:

    scripts/screenshot.sh docs/screenshot-transcript.png -- --family basic --demo-talk --transcript

With ``--speakers DEVICE`` the window plays and listens through the audio device ``DEVICE``
(echo cancellation on, the default) and the talk is spoken into that same device, as a user in
the room: on the project's PipeWire device (``eval "$(scripts/virtual_audio.sh)"`` first; device
``pipewire``) the microphone is the speakers' monitor, so the assistant hears itself too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from app.audio import DeviceSink
    from app.gui.window.main_window import MainWindow

__all__ = ["main", "spoken_conversation"]

SCRIPT: tuple[str | float, ...] = (
    0.5,
    "hello, can you hear me? I would like to plan a trip to the mountains this weekend",
    3.0,
    "what should I pack if the weather turns cold at night?",
    4.0,
    "and how long is the drive from the city?",
    2.5,
    "wait, sorry, one more question about the hiking trails",
    6.0,
)


def spoken_conversation(out: Path, script: tuple[str | float, ...] = SCRIPT) -> Path:
    """A 16 kHz WAV of ``script``: strings spoken by espeak-ng, floats as seconds of silence."""
    import soundfile as sf
    import soxr

    binary = shutil.which("espeak-ng")
    if binary is None:
        raise SystemExit("screenshot: espeak-ng is not installed: apt-get install espeak-ng")
    parts: list[np.ndarray] = []
    with tempfile.TemporaryDirectory(prefix="dc-shot-") as folder:
        for i, part in enumerate(script):
            if isinstance(part, float):
                parts.append(np.zeros(round(part * 16000), dtype=np.float32))
                continue
            wav = Path(folder) / f"{i}.wav"
            subprocess.run([binary, "-v", "en", "-s", "165", "-w", str(wav), part], check=True)
            audio, rate = sf.read(wav, dtype="float32")
            parts.append(soxr.resample(audio, rate, 16000).astype(np.float32))
    sf.write(out, np.concatenate(parts), 16000, subtype="PCM_16")
    return out


def _talk(out: Path, demo: bool) -> Path:
    """The user's side: the shipped demo talk (its first question and the pause after it), or
    espeak-ng's."""
    if demo:
        from app.demo import write_talk

        return write_talk(out, 14)
    return spoken_conversation(out)


class _User:
    """The user in the room: the talk's first utterance played into ``device`` once started,
    at its own rate (one question: its answer then plays whole, however busy the CPU)."""

    def __init__(self, device: str, wav: Path) -> None:
        import soundfile as sf

        audio, self.rate = sf.read(wav, dtype="float32")
        loud = np.flatnonzero(np.abs(audio) > 0.02)
        pauses = np.flatnonzero(np.diff(loud) > self.rate)  # over a second of quiet
        end = loud[pauses[0]] + 1 if pauses.size else audio.size
        self.audio = audio[: end + self.rate // 2]
        self.device = device
        self.sink: DeviceSink | None = None

    def start(self) -> None:
        from app.audio import DeviceSink

        self.sink = DeviceSink(
            self.device, rate=self.rate, buffer_s=self.audio.size / self.rate + 1
        )
        self.sink.start()
        self.sink.write(self.audio)

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m app.gui.screenshot", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/screenshot.png"))
    parser.add_argument("--input-wav", type=Path, help="the user's side (default: espeak-ng)")
    parser.add_argument("--periods", type=int, default=24, help="periods before the shot")
    parser.add_argument(
        "--family", default="synthetic", help="model family (default: the small CPU Token2Wav)"
    )
    parser.add_argument(
        "--demo-talk", action="store_true", help="the user's side: the shipped demo talk"
    )
    parser.add_argument(
        "--transcript", action="store_true",
        help="no arm switches; shoot once the transcript shows both sides (a recognizer's family)",
    )  # fmt: skip
    parser.add_argument(
        "--speakers", metavar="DEVICE",
        help="play and listen through DEVICE, the talk spoken into it (e.g. pipewire)",
    )  # fmt: skip
    parser.add_argument("--size", default="1600x980", help="window size WIDTHxHEIGHT")
    parser.add_argument(
        "--timeout", type=float, default=None,
        help="seconds to wait for the shot (default: 120 + 2 per period; more on a busy CPU)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (1: the small model keeps real time on a shared 2-core box)",
    )  # fmt: skip
    return parser


def _wait(seconds: float) -> None:
    """Run the event loop for ``seconds`` (the window paints, the engine reports)."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(round(seconds * 1000), loop.quit)
    loop.exec()


def _both_sides(window: MainWindow) -> bool:
    """The transcript holds the user's words and the assistant's answer."""
    text = window.transcript.text()
    return "] You: " in text and "] Assistant: " in text


def _converse(
    window: MainWindow,
    periods: int,
    transcript: bool = False,
    timeout_s: float | None = None,
    running: Callable[[], None] | None = None,
) -> None:
    """Run the conversation; switch arms on the way (not for ``transcript``: the shot waits for
    both sides of the transcript instead); return once the assistant speaks. ``running`` is
    called once, at the first period (the model loaded, the devices open)."""
    from engine.arms import Arm

    window.start_conversation()
    deadline = time.monotonic() + (timeout_s or 120 + periods * 2)
    switches = {} if transcript else {periods // 3: Arm.EAGER, (2 * periods) // 3: Arm.SRC}
    while time.monotonic() < deadline:
        _wait(0.1)
        done = len(window.panel.history)
        if done and running is not None:
            running()
            running = None
        if done in switches:
            window.switch_arm(switches.pop(done))
        last = window.panel.history.last
        if done >= periods and last is not None and last.phase == "speak":
            if transcript and not _both_sides(window):
                continue
            _wait(5.0 if transcript else 0.3)  # more of the answer; the meters settle
            return
        if window.controller.state.value == "idle" and done:
            return  # the input ended first: shoot what there is
    raise SystemExit(f"screenshot: no speaking period after {periods} periods; is the CPU busy?")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    import torch

    torch.set_num_threads(args.threads)
    from app.gui.launch import create_application
    from app.gui.window.main_window import MainWindow
    from app.gui.worker.routes import AudioRoute
    from app.settings import Settings, save_settings

    with tempfile.TemporaryDirectory(prefix="dc-shot-") as folder:
        tmp = Path(folder)
        os.environ["XDG_DATA_HOME"] = str(tmp / "data")
        wav = args.input_wav or _talk(tmp / "talk.wav", args.demo_talk)
        devices = {"input_device": args.speakers, "output_device": args.speakers}
        settings = Settings(
            family=args.family, model_size="small", **(devices if args.speakers else {})
        )
        settings_file = save_settings(settings, tmp / "settings.yaml")
        create_application([])  # PySide6 keeps the QApplication alive for the process
        if args.speakers:  # the devices, echo cancellation on (the default)
            route, user = AudioRoute(), _User(args.speakers, wav)
        else:
            route, user = AudioRoute(input_wav=wav, realtime=True, output="none"), None
        window = MainWindow(settings_file=settings_file, route=route, sessions_dir=tmp)
        window.resize(width, height)
        window.fit_screen()  # at 150-200% scaling the asked size may not fit the screen
        if not args.transcript:
            window.show_charts()  # the arm switches are the charts' to show
        window.show()
        _wait(0.5)
        try:
            running = user.start if user is not None else None
            _converse(window, args.periods, args.transcript, args.timeout, running)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            image = window.grab()
            if not image.save(str(args.out)):
                raise SystemExit(f"screenshot: cannot write {args.out}: check the folder")
            print(f"screenshot: {args.out} ({image.width()}x{image.height()})")
        finally:  # a shot that failed still ends the conversation: no thread left at exit
            window.close()
            if user is not None:
                user.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

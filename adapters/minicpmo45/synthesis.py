"""MiniCPM-o 4.5's period model: the windowed synthesis whose replay arms are captured before use.

:class:`DuplexSynthesis` is :class:`~engine.windowed.WindowedSynthesis` (the backbone, the vendor's
call rule, our Token2Wav) plus the catalog's warm-up (:mod:`adapters.minicpmo45.warmup`) at the
two moments a replay arm can start: the load, for the session's arm (:meth:`warm_up_load`, before
the decoder's own warm-up seals the engine), and a live switch into a replay arm it has not
captured yet (:meth:`set_arm`: the backbone's catalog once, its graphs serve every replay arm;
Token2Wav's for that arm). The switch's warm-up runs in the middle of a conversation, so
everything it writes is put back bit for bit (the carries' slots, the token loops' device state,
Token2Wav's state, the generators), then the engine is sealed: traffic captures nothing, and a
call outside the catalog runs eagerly, counted ``sealed``. What a warm-up did is in
:attr:`warmups` and, for a switch, in the next period's facts (the trace).

Threads: the engine thread.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.arms import Arm
from engine.duplex import PeriodStep
from engine.windowed import WindowedSynthesis

if TYPE_CHECKING:
    from adapters.face import Progress
    from adapters.minicpmo45.backbone import DuplexBackbone
    from adapters.minicpmo45.windows import DuplexWindower
    from adapters.token2wav.family import SpeechModel

__all__ = ["DuplexSynthesis"]

logger = logging.getLogger("duplexcadence.minicpmo45")


class DuplexSynthesis(WindowedSynthesis):
    """The family's period model (module docstring).

    Args:
        backbone: the duplex object as backbone (its ``rules``, or None: the vendor's code).
        speech: our Token2Wav (its stream is the synthesizer, its replay engine the session's).
        windower: the vendor's call rule.
        seed: the seed of Token2Wav's warm-up tokens (the request's).
    """

    def __init__(
        self, backbone: DuplexBackbone, speech: SpeechModel, windower: DuplexWindower, seed: int
    ) -> None:
        super().__init__(backbone, speech.speech, windower, speech.output_rate)
        self.speech, self.seed = speech, seed
        self.rules = backbone.rules
        self.warmed: set[Arm] = set()
        """Replay arms whose catalog (the backbone's and Token2Wav's) is captured."""
        self.warmups: list[dict[str, Any]] = []
        """What each warm-up did: ``at`` (load, switch), arm, calls, seconds, CPU seconds,
        captures and their seconds and bytes."""
        self._report: dict[str, Any] | None = None

    def warm_up_load(self, report: Progress) -> dict[str, Any] | None:
        """The backbone's catalog and Token2Wav's turns under the vendor's call rule, under the
        session's arm, at load (None: the arm does not replay, or no rules). Leaves the engine
        open: the decoder's own warm-up comes next and seals."""
        arm = self.arm
        if not arm.replay or self.rules is None or not self.speech.replay.enabled:
            return None
        done = self._warm(arm, "load", report, speech=True, seal=False)
        self.warmed.add(arm)
        return done

    def set_arm(self, arm: Arm) -> None:
        """Switch from the next call; into a replay arm not yet captured: warm, restore, seal
        (not with replay off: ``DUPLEXCADENCE_NO_REPLAY``, where every call runs eagerly)."""
        super().set_arm(arm)
        if arm.replay and arm not in self.warmed and self.speech.replay.enabled:
            self._report = self._warm(arm, "switch", lambda stage, fraction: None, speech=True)
            self.warmed.add(arm)

    def step(self, mic: np.ndarray) -> PeriodStep:
        out = super().step(mic)
        if self._report is None:
            return out
        report, self._report = self._report, None
        return dataclasses.replace(out, facts={**out.facts, "warmup": report})

    # -- internals ---------------------------------------------------------------------------

    def _warm(
        self, arm: Arm, at: str, report: Progress, *, speech: bool, seal: bool = True
    ) -> dict[str, Any]:
        from adapters.minicpmo45.warmup import (
            backbone_saved,
            backbone_steps,
            generators_saved,
            speech_saved,
            speech_steps,
        )
        from engine.warmup import warm_and_seal

        rules, stream = self.rules, self.speech.speech
        restores, steps = [generators_saved(stream.device)], []
        backbone = rules is not None and not rules.warmed
        if rules is not None and backbone:
            restores.append(backbone_saved(rules))
            steps += backbone_steps(rules)
        replay = self.speech.replay
        calls = {"backbone_entries": len(steps)}
        calls["backbone_calls"] = len(steps) * (replay.warmup_calls + 1)
        if speech:
            restores.append(speech_saved(stream))
            decoder = speech_steps(self.speech, self.seed, str(stream.device))
            steps += decoder
            calls["token2wav_calls"] = len(decoder)

        def restore() -> None:
            for put_back in restores:
                put_back()

        replay.unseal()
        cpu = time.process_time()
        done = warm_and_seal(
            replay, steps, report=report, device=stream.device, seal=seal, restore=restore
        )
        if rules is not None and backbone:
            rules.warmed = True
        done = {"at": at, "arm": str(arm), "calls": calls, **done}
        done["cpu_s"] = round(time.process_time() - cpu, 3)
        self.warmups.append(done)
        logger.info("warm-up at %s under %s: %s", at, arm, done)
        return done

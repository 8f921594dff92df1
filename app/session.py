"""A conversation session: what the headless command and the desktop app both run.

:func:`build_session` turns :class:`~app.settings.Settings` into a running
:class:`~engine.duplex.DuplexLoop` through the chosen family's face (:mod:`adapters.registry`,
:mod:`adapters.face`): the face loads the model (a checkpoint folder or seeded random weights),
warms up and captures its graphs, and hands back the period model the loop steps; the session
adds the cadence metrics, the trace and audit mode's per-period counts. Loading reports progress
``("loading", 0..1)``, then ``("capture", 0..1)``, so the conversation's first periods keep
cadence. Nothing here knows a family: periods, rates, stage names and the trace header's facts
come from what the face hands back.

A replay arm not warmed at start captures on its first calls after a switch (those periods are
slower, and the trace says why). Audit mode (``settings.audit``, paper §3.6) is the family's:
each period's record carries its counts under ``loop["audit"]``.

Threads: build and ``step`` on the engine thread (it owns every CUDA call); ``request_arm`` and
``set_push_to_talk`` from any thread. No Qt here.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adapters.face import FamilyError, LoadedModel, ModelRequest
from adapters.registry import family
from app.heap import release_heap
from app.settings import Settings, SettingsError, check_settings
from engine.arms import Arm
from engine.duplex import DuplexLoop, PeriodOutcome
from engine.metrics import Metrics
from engine.trace import TraceWriter, check_trace_path, session_metadata

__all__ = [
    "Progress",
    "Session",
    "build_session",
    "load_model",
    "model_key",
    "open_session",
    "replace_settings",
]

Progress = Callable[[str, float], None]


class Session:
    """One conversation: ``step`` one period at a time; see the module docstring."""

    def __init__(
        self,
        loop: DuplexLoop,
        loaded: LoadedModel,
        settings: Settings,
        *,
        device: str,
        trace: TraceWriter | None,
        warmed: set[Arm] | None = None,
    ) -> None:
        self.loop, self.loaded, self.settings, self.device = loop, loaded, settings, device
        self.model_name, self.stages = loaded.title, loaded.stages
        self.period_s = loop.model.period_s
        self.input_rate = loop.model.input_rate
        self.output_rate = loop.model.output_rate
        self.weights_synthetic = loaded.weights_synthetic
        self.metrics, self.replay, self.trace = loop.metrics, loop.replay, trace
        self.warmup, self.audit = loaded.warmup, loaded.audit
        self.switchable_arms = loaded.switchable_arms  # what the window offers to switch to
        # The replay arms whose graphs exist: shared with the sessions that reuse this model.
        self.warmed = warmed if warmed is not None else set()
        self._open_capture = threading.Event()
        if settings.arm.replay and settings.arm not in self.warmed:
            # a kept model whose graphs for this arm were never captured
            if warmed is not None and not loaded.warms_at_switch:
                self._open_capture.set()
            self.warmed.add(settings.arm)
        self._ptt_held = threading.Event()
        self._silence = np.zeros(loop.input_samples, dtype=np.float32)
        self._facts: dict[str, Any] = {}  # the caller's, for the next period's record
        family_facts = loop.period_facts
        loop.period_facts = lambda arm: {
            **(family_facts(arm) if family_facts is not None else {}),
            **self._facts,
        }

    @property
    def arm(self) -> Arm:
        """The arm running now (a requested switch shows here from the next period)."""
        return self.loop.arm

    @property
    def trace_path(self) -> Path | None:
        return self.trace.path if self.trace is not None else None

    @property
    def in_turn(self) -> bool:
        """True while the assistant's answer is under way or still queued for playback."""
        return self.loop.in_turn

    @property
    def hears(self) -> bool:
        """Whether the model hears the microphone now (push-to-talk off, or its key held)."""
        return not self.settings.push_to_talk or self._ptt_held.is_set()

    def step(self, mic: np.ndarray, facts: dict[str, Any] | None = None) -> PeriodOutcome:
        """One native period (engine thread only). Push-to-talk mutes the mic unless held.

        The period's trace line is durable when this returns; in audit mode its record holds
        the audit counts (``record.loop["audit"]``) before it is written, and ``facts`` (the
        caller's own measures, e.g. ``response_ms``) go into ``record.loop`` too.
        """
        self._facts = facts or {}
        if not self.hears:
            mic = self._silence
        if self._open_capture.is_set() and self.replay is not None and self.replay.sealed:
            self._open_capture.clear()
            self.replay.unseal()
            self.metrics.event("unseal", reason="arm not warmed at start: captures as it runs")
        return self.loop.step(mic)

    def request_arm(self, arm: Arm) -> None:
        """Switch arm at the next period (any thread); the trace logs an ``arm_switch``.

        A replay arm whose graphs were not captured at start re-opens capture (the engine was
        sealed after warm-up): its first periods warm and capture as they run (slower, logged);
        unless the model captures the arm's catalog itself at the switch (``warms_at_switch``).
        """
        arm = Arm(arm)
        if arm.replay and arm not in self.warmed:
            self.warmed.add(arm)
            if not self.loaded.warms_at_switch:
                self._open_capture.set()
        self.loop.request_arm(arm)

    def set_push_to_talk(self, held: bool) -> None:
        """Half-duplex gating (any thread): with ``settings.push_to_talk`` the model hears the
        microphone only while the key is held."""
        if held:
            self._ptt_held.set()
        else:
            self._ptt_held.clear()

    def close(self, *, keep_model: bool = False) -> None:
        """End the model's own threads and close the trace (idempotent); the session must not
        step afterwards. A model thread left running at exit aborts the process ("terminate
        called without an active exception") when its native thread pool is torn down.

        ``keep_model``: close only the trace; the loaded model stays for :func:`open_session`
        (the next conversation with the same :func:`model_key`), which resets it first."""
        close = None if keep_model else self.loaded.close
        if close is not None:
            self.loaded.close = None
            close()
        if self.trace is not None:
            self.trace.close()
        release_heap()  # device streams froze this session: let its cycles be collected


def build_session(
    settings: Settings,
    *,
    trace: Path | None = None,
    progress: Progress | None = None,
    n_steps: int | None = None,
    envelope: bool = True,
    realtime: bool = True,
) -> Session:
    """Load, warm up and start a session; raises ``SettingsError`` (the fix named) early.

    ``trace``: a ``.jsonl`` path for the per-period trace (checked before anything loads).
    ``n_steps``: solver steps per call instead of the model size's (tests use fewer).
    ``envelope=False``: leave out the stock state envelope (≈ 2.2 GB for Token2Wav at full
    size), as a state-rule deployment would; only S, SR and SRc can then run.
    ``realtime=False``: the periods are stepped as fast as they go (a file on a simulated clock).
    """
    if trace is not None:
        check_trace_path(trace, overwrite=True)
    loaded = load_model(
        settings, progress=progress, n_steps=n_steps, envelope=envelope, realtime=realtime
    )
    return open_session(loaded, settings, trace=trace, fresh=True)


def model_key(settings: Settings, **overrides: Any) -> tuple[str, ModelRequest]:
    """What a loaded model depends on: the family and its request, the arm left out (a loaded
    model switches arms live). Two settings with one key can share one loaded model."""
    request = settings.model_request(**overrides)
    return settings.family, dataclasses.replace(request, arm=Arm.EAGER)


def load_model(
    settings: Settings,
    *,
    progress: Progress | None = None,
    n_steps: int | None = None,
    envelope: bool = True,
    realtime: bool = True,
) -> LoadedModel:
    """Check ``settings`` and load, warm up and seal their family's model (see
    :func:`build_session` for the knobs); raises ``SettingsError`` naming the fix."""
    report = progress or (lambda stage, fraction: None)
    check_settings(settings)
    face = family(settings.family)
    request = settings.model_request(n_steps=n_steps, envelope=envelope, realtime=realtime)
    try:
        face.check(request)
        return face.load(request, report)
    except FamilyError as error:
        raise SettingsError(str(error)) from None


def open_session(
    loaded: LoadedModel,
    settings: Settings,
    *,
    trace: Path | None = None,
    fresh: bool = False,
    warmed: set[Arm] | None = None,
) -> Session:
    """A conversation on ``loaded`` (from :func:`load_model` with ``settings``' key): new
    cadence metrics and trace. ``fresh``: the model was just loaded; otherwise a past session
    ran it, so it is reset in place first and set to ``settings.arm`` (``warmed``: the arms
    whose graphs that session captured). Either way it then speaks as a fresh load would,
    bit for bit (tests/gui/test_gui_main_view.py)."""
    request = settings.model_request()
    if not fresh:
        loaded.model.reset()
        if loaded.model.arm != settings.arm:
            loaded.model.set_arm(settings.arm)
        # As a fresh load leaves them (every family re-seeds after its warm-up): the new
        # conversation's draws depend only on the request and its input, as the first's did.
        torch.manual_seed(request.seed)
    metrics = Metrics(loaded.model.period_s, device=request.device, arm=str(settings.arm))
    if loaded.audit is not None:
        loaded.audit.attach(metrics)
    writer = _writer(trace, settings, request, loaded)
    audit = loaded.audit
    loop = DuplexLoop(
        loaded.model, metrics, loaded.replay, writer,
        period_facts=(lambda arm: {"audit": audit.period(arm)}) if audit is not None else None,
    )  # fmt: skip
    return Session(loop, loaded, settings, device=request.device, trace=writer, warmed=warmed)


def _writer(
    trace: Path | None, settings: Settings, request: ModelRequest, loaded: LoadedModel
) -> TraceWriter | None:
    if trace is None:
        return None
    facts = {
        **settings.to_dict(),
        "model": loaded.title,
        **loaded.facts,
        "weights": "seeded random (not speech)" if loaded.weights_synthetic else "checkpoint",
        "audit_active": loaded.audit is not None,
        "warmup": loaded.warmup,
        "declaration": loaded.declaration,
    }
    meta = session_metadata(
        declaration=loaded.declaration, arm=str(settings.arm), settings=facts, device=request.device
    )
    model = loaded.model
    meta["period_s"], meta["input_rate"] = model.period_s, model.input_rate
    meta["output_rate"], meta["stages"] = model.output_rate, list(loaded.stages)
    return TraceWriter(trace, meta, overwrite=True)


def replace_settings(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with ``changes`` (validated like a loaded file)."""
    return Settings.from_dict({**settings.to_dict(), **_plain(changes)})


def _plain(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path | Arm) else v for k, v in changes.items()}

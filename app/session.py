"""A conversation session: what the headless command and the desktop app both run.

:func:`build_session` turns :class:`~app.settings.Settings` into a running
:class:`~engine.duplex.DuplexLoop`: the synthetic backbone (``adapters.synthetic``), Token2Wav
(a checkpoint folder or seeded random weights; ``full`` or ``small``), the voice prompt, the
replay engine, the cadence metrics and the trace. Loading reports progress ``("loading", 0..1)``,
then one warm-up turn pair through the synthesizer under the session's arm captures its graphs
(``("capture", 0..1)``), so the conversation's first periods keep cadence.

The stock cache envelope is always loaded (≈ 2.2 GB at full size), so every arm, eager included,
can be switched to live; a replay arm not warmed at start captures on its first calls (those
periods are slower, and the trace says why). After warm-up the synthesizer is reset and the
global generators re-seeded from ``settings.seed``: the conversation's audio then depends only on
the settings and the input, whichever arm runs and whatever the warm-up did.

Audit mode (``settings.audit``, paper §3.6) puts the shadow auditor (``engine.audit``) on the
flow stream's carry: every retention of the estimator cache under S, SR and SRc is shadowed by
the stock concatenation the declaration states, compared bit for bit and counted, never changing
what is computed. Each period's record carries the counts under ``loop["audit"]`` (or says the
arm has no carry to shadow); a region's first divergence is logged (``duplexcadence.audit``)
and recorded as an ``audit_divergence`` event of its period, and the conversation goes on. The
warm-up is audited too (the header's ``warmup.audit``). Off, nothing is attached: no extra work
(``app.session_audit``; the loop merges the counts into each record before writing it). The
warm-up is ``app.warmup``.

Threads: build and ``step`` on the engine thread (it owns every CUDA call); ``request_arm`` and
``set_push_to_talk`` from any thread. The session sets torch to one intra-op thread
(process-wide) unless the full model runs on the CPU: the CPU's tensors are then small and more
threads only add barrier waits. No Qt here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from adapters.token2wav.binding import DECLARATIONS, call_classes
from adapters.token2wav.presets import ModelPreset, preset
from adapters.token2wav.prompt import random_voice, voice_from_wav
from adapters.token2wav.speech import SpeechStream
from adapters.token2wav.stream import FlowStream
from app.heap import release_heap
from app.session_audit import SessionAudit, session_audit
from app.settings import Settings, SettingsError, check_settings
from app.warmup import warm_up, warmup_turn
from engine.arms import Arm
from engine.contract import load_declaration
from engine.duplex import Backbone, DuplexLoop, PeriodOutcome
from engine.metrics import Metrics
from engine.replay import ReplayEngine
from engine.trace import TraceWriter, check_trace_path, session_metadata
from engine.windows import TokenWindower

__all__ = [
    "OUTPUT_RATE",
    "Progress",
    "Session",
    "SessionAudit",
    "build_session",
    "replace_settings",
    "warmup_turn",
]

Progress = Callable[[str, float], None]
OUTPUT_RATE = 24_000  # Token2Wav's HiFT
INPUT_RATE = 16_000
PERIOD_S = 1.0  # the token2wav family's native period: 25 tokens, 50 mel frames
TOKENS_PER_S = 25
VOCAB = 6561
FAMILY_NAMES = {"minicpmo45": "MiniCPM-o 4.5 Token2Wav", "lycheefd": "Lychee-FD Token2Wav"}


class Session:
    """One conversation: ``step`` one period at a time; see the module docstring."""

    def __init__(
        self,
        loop: DuplexLoop,
        settings: Settings,
        *,
        device: str,
        model_name: str,
        trace: TraceWriter | None,
        warmup: dict[str, Any],
        audit: SessionAudit | None = None,
    ) -> None:
        self.loop, self.settings, self.device, self.model_name = loop, settings, device, model_name
        self.period_s = loop.backbone.period_s
        self.input_rate = loop.backbone.input_rate
        self.output_rate = loop.output_rate
        self.weights_synthetic = settings.checkpoint is None
        self.metrics, self.engine, self.trace = loop.metrics, loop.engine, trace
        self.warmup, self.audit = warmup, audit
        self._warmed = {settings.arm} if settings.arm.replay else set()
        self._open_capture = threading.Event()
        self._ptt_held = threading.Event()
        self._silence = np.zeros(loop.input_samples, dtype=np.float32)

    @property
    def arm(self) -> Arm:
        """The arm running now (a requested switch shows here from the next period)."""
        return self.loop.arm

    @property
    def trace_path(self) -> Path | None:
        return self.trace.path if self.trace is not None else None

    def step(self, mic: np.ndarray) -> PeriodOutcome:
        """One native period (engine thread only). Push-to-talk mutes the mic unless held.

        The period's trace line is durable when this returns; in audit mode its record holds
        the audit counts (``record.loop["audit"]``) before it is written.
        """
        if self.settings.push_to_talk and not self._ptt_held.is_set():
            mic = self._silence
        if self._open_capture.is_set() and self.engine is not None and self.engine.sealed:
            self._open_capture.clear()
            self.engine.unseal()
            self.metrics.event("unseal", reason="arm not warmed at start: captures as it runs")
        return self.loop.step(mic)

    def request_arm(self, arm: Arm) -> None:
        """Switch arm at the next period (any thread); the trace logs an ``arm_switch``.

        A replay arm whose graphs were not captured at start re-opens capture (the engine was
        sealed after warm-up): its first periods warm and capture as they run (slower, logged).
        """
        arm = Arm(arm)
        if arm.replay and arm not in self._warmed:
            self._warmed.add(arm)
            self._open_capture.set()
        self.loop.request_arm(arm)

    def set_push_to_talk(self, held: bool) -> None:
        """Half-duplex gating (any thread): with ``settings.push_to_talk`` the model hears the
        microphone only while the key is held."""
        if held:
            self._ptt_held.set()
        else:
            self._ptt_held.clear()

    def close(self) -> None:
        """Close the trace (idempotent); the session must not step afterwards."""
        if self.trace is not None:
            self.trace.close()
        release_heap()  # device streams froze this session: let its cycles be collected


def build_session(
    settings: Settings,
    *,
    trace: Path | None = None,
    progress: Progress | None = None,
    backbone: Backbone | None = None,
    n_steps: int | None = None,
    envelope: bool = True,
) -> Session:
    """Load, warm up and start a session; raises ``SettingsError``/``CheckpointError`` early.

    ``trace``: a ``.jsonl`` path for the per-period trace (checked before anything loads).
    ``backbone``: replaces the synthetic backbone (its period must be 1 s at 16 kHz).
    ``n_steps``: solver steps per flow call instead of the model size's (tests use fewer).
    ``envelope=False``: leave out the stock cache envelope (≈ 2.2 GB at full size), as a
    state-rule deployment would; only S, SR and SRc can then run (benchmarks of memory).
    """
    report = progress or (lambda stage, fraction: None)
    check_settings(settings)
    if trace is not None:
        check_trace_path(trace, overwrite=True)
    device = settings.resolved_device()
    size = preset(settings.resolved_model_size(device))
    if device != "cpu" or size.name == "small":
        # The CPU's tensors are small (the backbone, the VAD, the small model): more intra-op
        # threads only add barrier waits. Measured on the H200 host (16 cores): the backbone took
        # 50-60 ms p50 and up to 0.9 s with 16 threads, ~20 ms with one on a 2-core laptop-class
        # CPU; real time also needs spare cores for the audio callbacks.
        torch.set_num_threads(1)
    torch.manual_seed(settings.seed)
    report("loading", 0.0)
    if not envelope and not settings.arm.state_rule:
        raise SettingsError(
            f"arm {settings.arm} runs the stock path, which needs the cache envelope: "
            "choose S, SR or SRc, or load the envelope"
        )
    flow, hift = _load_models(settings, size, device, envelope, report)
    prompt_tokens, prompt_mel, spk = _voice(settings, device)
    report("loading", 0.9)
    windower = TokenWindower.from_declaration(DECLARATIONS[settings.family])
    engine = ReplayEngine(device)
    classes = call_classes(
        settings.family, prompt_mel.shape[1], windower.max_call, windower.lookahead
    )
    flow_stream = FlowStream(
        flow, prompt_tokens, prompt_mel, spk,
        arm=settings.arm, engine=engine, classes=classes,
        n_steps=n_steps or size.n_steps, max_call_tokens=windower.max_call,
    )  # fmt: skip
    stream = SpeechStream(flow_stream, hift, engine)
    audit = session_audit(settings.family, flow_stream) if settings.audit else None
    report("loading", 1.0)
    if audit is not None:
        audit.attach()
    warmup = warm_up(stream, windower, engine, settings.seed, device, report)
    if audit is not None:
        warmup["audit"] = audit.totals()
    torch.manual_seed(settings.seed)  # the conversation's draws do not depend on the warm-up
    metrics = Metrics(PERIOD_S, device=device, arm=str(settings.arm))
    if audit is not None:
        audit.attach(metrics)
    model_name = _model_name(settings, size)
    steps = n_steps or size.n_steps
    writer = _writer(trace, settings, device, model_name, size.name, steps, warmup, audit)
    loop = DuplexLoop(
        backbone or _synthetic_backbone(settings, windower, device),
        stream, windower, metrics, engine, writer, OUTPUT_RATE,
        period_facts=(lambda arm: {"audit": audit.period(arm)}) if audit is not None else None,
    )  # fmt: skip
    return Session(
        loop,
        settings,
        device=device,
        model_name=model_name,
        trace=writer,
        warmup=warmup,
        audit=audit,
    )


def _load_models(
    settings: Settings, size: ModelPreset, device: str, envelope: bool, report: Progress
) -> tuple[Any, Any]:
    """(flow, hift) on ``device``; with the stock envelope every arm is switchable."""
    from adapters.token2wav.checkpoint import build_flow, load_token2wav
    from adapters.token2wav.hift import build_hift
    from adapters.weights import randomize_

    if size.name == "full" or settings.checkpoint is not None:
        flow, hift = load_token2wav(
            settings.checkpoint, seed=settings.seed, device=device, envelope=envelope
        )
        report("loading", 0.7)
        return flow, hift
    flow = build_flow(size.flow, seed=settings.seed, envelope=envelope)
    randomize_(flow, settings.seed)
    report("loading", 0.5)
    hift = build_hift(settings.seed, size.hift)
    report("loading", 0.7)
    return flow.to(device), hift.to(device)


def _voice(settings: Settings, device: str) -> tuple[Tensor, Tensor, Tensor]:
    """The voice prompt ``(tokens (1, n), mel (1, 2n, 80), spk (1, 192))``: the recording in
    ``settings.voice`` through the checkpoint's tokenizer and speaker model, else seeded random."""
    if settings.voice is None:
        voice = random_voice(settings.voice_frames, settings.seed, device)
    elif settings.checkpoint is None:
        raise SettingsError(
            f"voice {settings.voice}: a voice prompt needs a checkpoint folder (its "
            "speech_tokenizer_v2_25hz.onnx and campplus.onnx): choose one, or clear the voice"
        )
    else:
        voice = voice_from_wav(settings.voice, settings.checkpoint, device)
    return voice.tokens, voice.mel, voice.spk


def _synthetic_backbone(settings: Settings, windower: TokenWindower, device: str) -> Backbone:
    from adapters.synthetic import SyntheticBackbone

    backbone: Backbone = SyntheticBackbone(
        period_s=PERIOD_S,
        input_rate=INPUT_RATE,
        tokens_per_s=TOKENS_PER_S,
        lookahead=windower.lookahead,
        vocab=VOCAB,
        device=device,
        seed=settings.seed,
    )
    return backbone


def _model_name(settings: Settings, size: ModelPreset) -> str:
    weights = "checkpoint" if settings.checkpoint is not None else "seeded random weights"
    return f"{FAMILY_NAMES[settings.family]} ({size.name}, {weights})"


def _writer(
    trace: Path | None,
    settings: Settings,
    device: str,
    model_name: str,
    size: str,
    n_steps: int,
    warmup: dict[str, Any],
    audit: SessionAudit | None,
) -> TraceWriter | None:
    if trace is None:
        return None
    facts = {
        **settings.to_dict(),
        "model": model_name,
        "model_size": size,
        "n_steps": n_steps,
        "weights": "checkpoint" if settings.checkpoint else "seeded random (not speech)",
        "audit_active": audit is not None,
        **({"audit_scope": audit.header()} if audit is not None else {}),
        "warmup": warmup,
        "declaration": load_declaration(DECLARATIONS[settings.family]).name,
    }
    meta = session_metadata(
        declaration=DECLARATIONS[settings.family],
        arm=str(settings.arm),
        settings=facts,
        device=device,
    )
    meta["period_s"], meta["input_rate"], meta["output_rate"] = PERIOD_S, INPUT_RATE, OUTPUT_RATE
    return TraceWriter(trace, meta, overwrite=True)


def replace_settings(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with ``changes`` (validated like a loaded file)."""
    return Settings.from_dict({**settings.to_dict(), **_plain(changes)})


def _plain(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path | Arm) else v for k, v in changes.items()}

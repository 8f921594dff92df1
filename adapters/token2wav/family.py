"""The Token2Wav families' face: a synthetic backbone speaking through the Token2Wav decoder.

Two declarations, one face each: ``synthetic`` (MiniCPM-o 4.5's decoder, 28-token windows at a
25-token stride) and ``lycheefd`` (Lychee-FD's, 13/10). The backbone that decides when to speak
is the seeded synthetic one (``adapters.synthetic``: silero-vad turn-taking from
``adapters.turns``, random speech tokens), so without a checkpoint the audio is not speech, and
with one it is speech synthesis of random tokens: the decoder's cadence, replay and memory are
what is real.

:meth:`Token2WavFamily.load` builds, from the request and the declaration alone: the flow and
HiFT (a checkpoint folder or seeded random weights, ``full`` or ``small``), the voice prompt
(a recording through the checkpoint's tokenizer and speaker model, or seeded random of
``voice_frames``), the replay engine, the catalog at the voice's prompt length, the streams
under the request's arm, audit mode on the carry, the warm-up (then ``seal()``), and the
windowed period model. The stock cache envelope is loaded unless ``envelope=False`` (≈ 2.2 GB at
full size), so every arm, eager included, can be switched to live. After warm-up the global
generators are re-seeded: the conversation's audio depends only on the request and the input.

:meth:`Token2WavFamily.load_speech` is the decoder alone (``duplexcadence synth``).

Threads: the engine thread (it owns every CUDA call). Torch is imported inside ``load`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.face import (
    FamilyError,
    Footprint,
    LoadedModel,
    ModelRequest,
    Progress,
    PublicCheckpoint,
)
from adapters.token2wav.config import CheckpointError, check_folder
from adapters.token2wav.speech_model import SpeechModel
from adapters.token2wav.voice_limits import MIN_PROMPT_S, max_prompt_seconds
from engine.arms import switchable_arms
from engine.sizes import byte_text

if TYPE_CHECKING:
    from adapters.token2wav.presets import ModelPreset
    from adapters.token2wav.sessions import Token2WavSessions
    from adapters.token2wav.shared import SharedSession

__all__ = ["LYCHEEFD", "SYNTHETIC", "SpeechModel", "Token2WavFamily"]

_VOICE_FILES = ("speech_tokenizer_v2_25hz.onnx", "campplus.onnx")


@dataclass(frozen=True)
class Token2WavFamily:
    """A Token2Wav declaration with the synthetic backbone; an ``adapters.face.Family``."""

    key: str
    title: str
    declaration: str
    reads: frozenset[str] = frozenset(
        {"device", "model_size", "checkpoint", "voice", "voice_frames", "arm", "audit", "seed"}
    )
    full_duplex: bool = True
    ships_weights: bool = False
    downloads: tuple[PublicCheckpoint, ...] = ()

    def check(self, request: ModelRequest) -> None:
        """Folder and files only (torch-free)."""
        if request.checkpoint is not None:
            try:
                check_folder(request.checkpoint)
            except CheckpointError as error:
                raise FamilyError(
                    f"{error}: choose the token2wav folder "
                    "(MiniCPM-o-4_5/assets/token2wav or Step-Audio-2-mini/token2wav)",
                    "checkpoint",
                ) from None
            if request.model_size == "small":
                raise FamilyError(
                    f"checkpoint {request.checkpoint} holds full-size weights, but the model size "
                    f"is small (auto picks small on {request.device}): set the model size to full",
                    "model_size",
                )
        if request.voice is not None:
            self._check_voice(request.voice, request.checkpoint)
        else:
            self._check_voice_frames(request.voice_frames)
        if not request.envelope and not request.arm.state_rule:
            raise FamilyError(
                f"arm {request.arm} runs the stock path, which needs the cache envelope: "
                "choose S, SR or SRc, or load the envelope",
                "arm",
            )

    def footprint(self, request: ModelRequest) -> Footprint:
        """The token2wav folder, its weights, and the state its declaration's plan prices."""
        from engine.declaration_io import load_declaration
        from engine.plan import make_plan

        state = make_plan(load_declaration(self.declaration)).price(request.arm).total_bytes
        folder = request.checkpoint
        if folder is None or not folder.is_dir():
            needs = (
                f"{byte_text(state)} of state under {request.arm} (its declaration's plan) besides "
                "its weights; seeded random weights run small on the CPU, full size on a GPU"
            )
            return Footprint((), needs)
        weights = sum(f.stat().st_size for f in folder.glob("*.pt") if f.is_file())
        needs = (
            f"{byte_text(weights + state)} on a GPU for real time: {byte_text(weights)} weights, "
            f"{byte_text(state)} of state under {request.arm} (its declaration's plan)"
        )
        return Footprint((folder,), needs)

    def voice_seconds(self) -> tuple[float, float]:
        """The shortest and longest voice recording its declaration admits, in seconds
        (torch-free: the command line's help quotes it)."""
        return MIN_PROMPT_S, max_prompt_seconds(self.declaration)

    def _check_voice_frames(self, frames: int) -> None:
        """A random voice's prompt must fit every region's stock envelope (the declaration's:
        844 frames for MiniCPM-o 4.5), before anything is allocated for it."""
        from engine.declaration_io import load_declaration
        from engine.plan import make_plan

        declaration = load_declaration(self.declaration)
        plan = make_plan(declaration, {"f_prompt": frames})
        for region in plan.over_envelope():
            raise FamilyError(
                f"voice_frames = {frames}: region {region.name} would need "
                f"{region.demand_shape}, over its stock envelope {region.envelope_shape}; "
                f"give a shorter voice (the default has {declaration.values()['f_prompt']} "
                "frames)",
                "voice_frames",
            )

    def load(self, request: ModelRequest, progress: Progress) -> LoadedModel:
        speech = self.load_speech(request, progress)
        audit = self.audit_mode(speech) if request.audit else None
        progress("loading", 1.0)
        warmup = self.warm_up(speech, request, progress, audit)
        return self.loaded(speech, request, warmup, audit)

    def loaded(
        self,
        speech: SpeechModel,
        request: ModelRequest,
        warmup: dict[str, Any],
        audit: Any,
        shared: SharedSession | None = None,
    ) -> LoadedModel:
        """The period model over a warmed-up decoder: the synthetic backbone (seeded by the
        request) speaking through ``speech``; with ``shared``, through that session on its
        lane's bindings (``speech`` is the lane's: ``adapters.token2wav.shared``)."""
        from adapters.synthetic import SyntheticBackbone
        from adapters.token2wav.shared import SharedSynthesis
        from adapters.turns.vad import RATE
        from engine.windowed import WindowedSynthesis

        token_rate = speech.declaration.clock_rate("token", speech.values)
        backbone = SyntheticBackbone(
            period_s=speech.values["period_tokens"] / token_rate,
            input_rate=RATE,
            tokens_per_s=token_rate,
            lookahead=speech.windower.lookahead,
            vocab=speech.vocab,
            device=request.device,
            seed=request.seed,
        )
        model = (
            WindowedSynthesis(backbone, speech.speech, speech.windower, speech.output_rate)
            if shared is None
            else SharedSynthesis(backbone, shared, speech.output_rate)
        )
        weights = "checkpoint" if request.checkpoint is not None else "seeded random weights"
        return LoadedModel(
            model=model,
            replay=speech.replay,
            title=f"{self.title} ({speech.size.name}, {weights})",
            declaration=speech.declaration.name,
            weights_synthetic=request.checkpoint is None,
            stages=("backbone", "flow", "vocoder"),
            warmup=warmup,
            facts={
                "model_size": speech.size.name,
                "n_steps": speech.n_steps,
                "voice_frames": speech.voice.frames,
                **({"audit_scope": audit.header()} if audit is not None else {}),
            },
            audit=audit,
            switchable_arms=switchable_arms(request.envelope),
        )

    def load_speech(self, request: ModelRequest, progress: Progress) -> SpeechModel:
        """The decoder under the request's arm: weights, voice, engine, catalog, streams.

        The voice loads first, so a bad prompt fails in a second, not after the flow.
        """
        from adapters.token2wav.sessions import voice_for

        self._seeded(request)
        voice = voice_for(request, self.declaration)
        return self.load_sessions(request, progress).speech(voice, request.arm)

    def load_sessions(self, request: ModelRequest, progress: Progress) -> Token2WavSessions:
        """The weights alone, for many sessions (``adapters.face.SessionSource``)."""
        from adapters.token2wav.presets import preset
        from adapters.token2wav.sessions import Token2WavSessions
        from engine.declaration_io import load_declaration

        self._seeded(request)
        progress("loading", 0.0)
        size = preset(request.model_size)
        if request.device == "cpu" and size.name == "full":  # the small one is never large
            _check_host(request, size, self.declaration)
        flow, hift = _load_models(request, size, progress)
        progress("loading", 0.9)
        declaration = load_declaration(self.declaration)
        return Token2WavSessions(self, request, flow, hift, declaration, size)

    def _seeded(self, request: ModelRequest) -> None:
        """Checks ``request``, sets the host threads, pins cuDNN to deterministic algorithms and
        seeds the global generators."""
        import torch

        from adapters.token2wav.presets import preset

        self.check(request)
        if request.device != "cpu" or preset(request.model_size).name == "small":
            # The CPU's tensors are small (the backbone, the VAD, the small model): more intra-op
            # threads only add barrier waits. Measured on the H200 host (16 cores): the backbone
            # took 50-60 ms p50 and up to 0.9 s with 16 threads, ~20 ms with one on a 2-core
            # laptop-class CPU; real time also needs spare cores for the audio callbacks.
            torch.set_num_threads(1)
        torch.manual_seed(request.seed)
        # cuDNN may run the vocoder's transposed convolutions with an atomics-based kernel whose
        # bits vary run to run (tests/oracle/test_oracle_hift.py): eager's PCM would not
        # reproduce itself on a GPU and no arm could equal it (MiniCPM-o's H200 run: same speech
        # tokens, other PCM from unit 0). Deterministic algorithms only, for the process.
        torch.backends.cudnn.deterministic = True

    # -- internals ---------------------------------------------------------------------------

    def _check_voice(self, voice: Path, checkpoint: Path | None) -> None:
        if checkpoint is None:
            raise FamilyError(
                f"voice {voice} needs a checkpoint folder (its {' and '.join(_VOICE_FILES)}): "
                "choose a checkpoint folder, or clear the voice",
                "voice",
            )
        if not voice.exists():
            raise FamilyError(f"voice {voice} does not exist: choose a voice recording", "voice")
        if not voice.is_file() or voice.suffix.lower() != ".wav":
            raise FamilyError(f"voice {voice} is not a .wav file: choose a recording", "voice")
        missing = [name for name in _VOICE_FILES if not (checkpoint / name).is_file()]
        if missing:
            raise FamilyError(
                f"checkpoint {checkpoint} lacks {', '.join(missing)}, which turn a recording "
                "into a voice: choose the full token2wav folder, or clear the voice",
                "checkpoint",
            )

    def audit_mode(self, speech: SpeechModel) -> Any:
        """Audit mode on the decoder's carry, attached from its next write (the warm-up's too)."""
        from adapters.token2wav.audit_mode import carry_audit

        audit = carry_audit(speech.speech.flow)
        audit.attach()
        return audit

    def warm_up(
        self, speech: SpeechModel, request: ModelRequest, progress: Progress, audit: Any
    ) -> dict[str, Any]:
        """Capture the decoder's common calls, seal, and re-seed the global generators."""
        import torch

        from adapters.token2wav.warmup import warm_up

        warmup = warm_up(
            speech.speech, speech.windower, speech.replay,
            steady_to_bound=speech.binding.width,
            vocab=speech.vocab, seed=request.seed, device=request.device, report=progress,
        )  # fmt: skip
        if audit is not None:
            warmup["audit"] = audit.totals()
        torch.manual_seed(request.seed)  # the conversation's draws do not depend on the warm-up
        return warmup


WORKSPACE_BYTES = 512 << 20  # the activations of one window on the CPU (full size), and slack


def _check_host(request: ModelRequest, size: ModelPreset, declaration: str) -> None:
    """Refuse, before anything is allocated on the CPU, a decoder the host cannot hold: its
    modules' bytes (weights, and the stock envelope when loaded), the checkpoint files read
    while loading, what its plan prices under the arm, a workspace.

    First what the declaration and the folder state, before anything is built: the stock
    envelope its regions declare, the files, the plan's price, the workspace (a host that
    cannot hold these is refused at once, weights not yet counted). Then the modules' own
    bytes, built on the meta device (a few seconds: torch's meta kernels import its compiler).
    """
    import torch

    from adapters.host_memory import check_host_memory
    from adapters.token2wav.checkpoint import build_flow
    from adapters.token2wav.config import read_flow_config
    from adapters.token2wav.hift import build_hift
    from engine.declaration_io import load_declaration
    from engine.plan import make_plan

    folder = request.checkpoint
    try:
        config = size.flow if folder is None else read_flow_config(folder / "flow.yaml")
    except CheckpointError as error:
        raise FamilyError(str(error), "checkpoint") from None
    files = 0 if folder is None else sum(f.stat().st_size for f in folder.glob("*.pt"))
    plan = make_plan(load_declaration(declaration))
    price = plan.price(request.arm)
    # Without the state rule the plan prices the state at the stock envelope: the flow's own
    # buffers, counted with its modules; the replay's staging copies come on top.
    state = price.total_bytes if request.arm.state_rule else price.staging_bytes
    rest = (
        f"{byte_text(files)} checkpoint files while loading, "
        f"{byte_text(state)} state under {request.arm}, "
        f"{byte_text(WORKSPACE_BYTES)} workspace"
    )
    what = f"Token2Wav ({size.name})"
    fix = "close other programs, choose the small model size, or use a CUDA GPU"
    envelope = 0
    if request.envelope:
        envelope = sum(r.envelope_bytes for r in plan.regions if r.envelope_shape is not None)
    declared = f"{byte_text(envelope)} stock envelope (its declaration's), " if envelope else ""
    known = envelope + files + state + WORKSPACE_BYTES
    check_host_memory(known, what, f"{declared}{rest}, and its weights", fix, at_least=True)
    with torch.device("meta"):
        flow = build_flow(config, seed=request.seed, envelope=request.envelope)
        hift = build_hift(None, size.hift)  # shapes only: no values drawn
    tensors = [*flow.parameters(), *flow.buffers(), *hift.parameters(), *hift.buffers()]
    modules = sum(t.numel() * t.element_size() for t in tensors)
    weights = f"{byte_text(modules)} weights{' and stock envelope' if request.envelope else ''}"
    needed = modules + files + state + WORKSPACE_BYTES
    check_host_memory(needed, what, f"{weights}, {rest}", fix)


def _load_models(request: ModelRequest, size: ModelPreset, progress: Progress) -> tuple[Any, Any]:
    """(flow, hift) on the request's device; with the stock envelope every arm is switchable."""
    from adapters.token2wav.checkpoint import build_flow, load_token2wav
    from adapters.token2wav.hift import build_hift
    from adapters.weights import randomize_

    device, seed = request.device, request.seed
    if size.name == "full" or request.checkpoint is not None:
        try:
            flow, hift = load_token2wav(
                request.checkpoint, seed=seed, device=device, envelope=request.envelope
            )
        except CheckpointError as error:
            raise FamilyError(str(error), "checkpoint") from None
        progress("loading", 0.7)
        return flow, hift
    flow = build_flow(size.flow, seed=seed, envelope=request.envelope)
    randomize_(flow, seed)
    progress("loading", 0.5)
    hift = build_hift(seed, size.hift)
    progress("loading", 0.7)
    return flow.to(device), hift.to(device)


SYNTHETIC = Token2WavFamily(
    key="synthetic",
    title="MiniCPM-o 4.5 Token2Wav, synthetic backbone",
    declaration="minicpmo45_token2wav",
    downloads=(
        PublicCheckpoint(
            "MiniCPM-o 4.5 voice (Token2Wav)", "openbmb/MiniCPM-o-4_5",
            ("assets/token2wav/*",), "assets/token2wav",
            "its flow and vocoder (flow.yaml, flow.pt, hift_original.pt); real time needs a GPU",
            "synthetic",
        ),
    ),
)  # fmt: skip
LYCHEEFD = Token2WavFamily(
    key="lycheefd",
    title="Lychee-FD Token2Wav, synthetic backbone",
    declaration="lycheefd_token2wav",
)

"""The family face: the one object a model family hands the app.

A family is a package under ``adapters/`` with a declaration under ``assets/declarations/`` and
one line in :mod:`adapters.registry`. Its face (:class:`Family`) says what it is (key, title,
declaration, which request fields it reads), checks a request before anything loads
(:meth:`Family.check`, torch-free, so settings can be checked in the window) and loads
(:meth:`Family.load`): the weights (a checkpoint folder or seeded random ones), the voice, the
replay engine, the warm-up that captures every catalog signature the conversation opens with
(then ``seal()``), and audit mode where the family has a carry to shadow. What it hands back
(:class:`LoadedModel`) holds the :class:`~engine.duplex.PeriodModel` the conversation loop steps,
with its native period and rates, the stage names the live panel plots, and the facts the trace
header records.

The face takes plain values (:class:`ModelRequest`), never the app's settings object: adapters
never import ``app``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.arms import Arm

if TYPE_CHECKING:  # torch-free at run time: the settings dialog lists and checks families
    from contextlib import AbstractContextManager

    from engine.duplex import PeriodModel
    from engine.metrics import Metrics
    from engine.multiplex import SessionRng
    from engine.replay import ReplayEngine

__all__ = [
    "DEFAULT_VOICE_DECLARATION",
    "EagerGuard",
    "Family",
    "FamilyAudit",
    "FamilyError",
    "Footprint",
    "LoadedModel",
    "ModelRequest",
    "Progress",
    "PublicCheckpoint",
    "SessionSource",
    "declared_voice_frames",
    "has_speech_decoder",
    "session_source",
    "speech_decoder",
    "voice_seconds",
]

Progress = Callable[[str, float], None]  # (stage: "loading" | "capture" | ..., fraction 0..1)

DEFAULT_VOICE_DECLARATION = "minicpmo45_token2wav"  # whose default voice a random voice matches


@cache
def declared_voice_frames() -> int:
    """The default voice's prompt length in mel frames: the declaration's ``f_prompt`` (read once,
    torch-free)."""
    from engine.declaration_io import load_declaration

    return load_declaration(DEFAULT_VOICE_DECLARATION).values()["f_prompt"]


class FamilyError(ValueError):
    """A request a family cannot serve; the message names the value and the fix.

    ``setting`` names the request field at fault (``checkpoint``, ``voice``, ...), so each place
    can say it in its own words (a flag in the terminal, a field in the dialog).
    """

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True)
class ModelRequest:
    """What the app asks of a family, as plain values (its settings, with ``auto`` resolved).

    Field names are the settings' names, so a family's error can name the setting to change.
    """

    device: str = "cpu"  # "cpu" or "cuda[:N]"
    model_size: str = "small"  # "full" (the released sizes) or "small" (CPU real time)
    checkpoint: Path | None = None  # a checkpoint folder; None = seeded random weights
    voice: Path | None = None  # a voice prompt recording, where the family takes one
    # A seeded random voice's prompt length, where it applies (default: the declaration's).
    voice_frames: int = field(default_factory=declared_voice_frames)
    # A voice by name (a checkpoint folder's, e.g. PersonaPlex's NATF2) is carried in ``voice``
    # as a relative path that is not a file; the family resolves it.
    role: str | None = None  # a role prompt: a preset's name or free text, where it applies
    arm: Arm = Arm.SRC
    audit: bool = False
    seed: int = 0
    trust_checkpoint_code: bool = False  # the user agreed to run code from the checkpoint folder
    n_steps: int | None = None  # solver steps per call instead of the model size's (tests)
    envelope: bool = True  # load the stock state envelope, so every arm can be switched to
    # The periods come at a clock's pace (a device, a paced file); False: as fast as they are
    # stepped (a file on a simulated clock), so a model whose work runs off the engine thread
    # (the basic cascade) waits for it instead of answering after the input has ended.
    realtime: bool = True


@dataclass(frozen=True)
class Footprint:
    """What a family takes on this machine, torch-free (the Models page lists it)."""

    where: tuple[Path, ...]  # the folders its weights are in (a checkpoint, shipped packages)
    needs: str  # what it needs to run, in words, its figures computed from its own numbers
    packages: tuple[str, ...] = ()  # the modules it imports beyond the base install


@dataclass(frozen=True)
class PublicCheckpoint:
    """A checkpoint a user may download (the Models page): its hub repository and the files the
    app needs from it; a family declares its own in :attr:`Family.downloads`."""

    title: str
    repo_id: str
    patterns: tuple[str, ...]  # allow_patterns: only these files come down
    subfolder: str  # the checkpoint folder inside the download (Settings points at it)
    needs: str  # what comes down, in words
    family: str  # the family (adapters.registry key) that loads it
    gpu: bool = True  # it needs a CUDA GPU to run in real time (checked before downloading)
    # A folder the download goes into (as a folder named after the repository) that is itself
    # the checkpoint: downloads that share one make one checkpoint (the basic voice's models)
    group: str = ""

    @property
    def folder_name(self) -> str:
        """The download's folder inside the models folder: the repository's name, inside its
        group if it has one."""
        name = self.repo_id.split("/")[-1]
        return f"{self.group}/{name}" if self.group else name

    def checkpoint_in(self, download: Path) -> Path:
        """The folder Settings points at once the files are in ``download`` (the models folder
        joined with :attr:`folder_name`): the group, else the download's :attr:`subfolder`."""
        return download.parent if self.group else download / self.subfolder


class FamilyAudit(Protocol):
    """Audit mode of a loaded model (paper §3.6): the shadow auditor on its carry."""

    def attach(self, metrics: Metrics) -> None:
        """Record divergences as events of ``metrics``' periods from now on (a fresh count)."""
        ...

    def period(self, arm: Arm) -> dict[str, Any]:
        """This period's audit counts for its trace record (``loop["audit"]``)."""
        ...

    def header(self) -> dict[str, Any]:
        """What is audited, for the trace header."""
        ...


@dataclass
class LoadedModel:
    """A loaded, warmed-up model: what :meth:`Family.load` hands the app."""

    model: PeriodModel  # stepped one native period at a time by engine.duplex.DuplexLoop
    replay: ReplayEngine | None  # its replay engine (counters per period), sealed after warm-up
    title: str  # what the window calls it, e.g. "Moshi (small, seeded random weights)"
    declaration: str  # the declaration's name
    weights_synthetic: bool  # seeded random weights: the audio is not speech
    stages: tuple[str, ...]  # the spans of a period the live panel plots, in order
    warmup: dict[str, Any] = field(default_factory=dict)  # what warm-up did (calls, captures, s)
    facts: Mapping[str, Any] = field(default_factory=dict)  # more for the trace header
    audit: FamilyAudit | None = None  # audit mode, when asked for and the family has a carry
    has_text: bool = False  # the model says text (a transcript) beside its speech
    # The arms the session can switch to live (the window offers only these); () where the arm
    # changes nothing (a family that replays nothing).
    switchable_arms: tuple[Arm, ...] = tuple(Arm)
    # The model captures a replay arm's catalog itself at a live switch into it (warm-up,
    # restore, seal: MiniCPM-o's period model), so the session does not re-open capture.
    warms_at_switch: bool = False
    # Ends what the model runs besides the loop (a worker thread and the native thread pools
    # it calls into); the session calls it once, at its close. None: nothing to end.
    close: Callable[[], None] | None = None


class Family(Protocol):
    """One model family's face; see the module docstring."""

    key: str  # the settings' and the command line's name, e.g. "moshi"
    title: str  # for people, e.g. "Moshi (Kyutai): 7B speech-text model + Mimi codec"
    declaration: str  # its declaration's name (assets/declarations/<name>.yaml)
    reads: frozenset[str]  # the ModelRequest fields it uses; the window greys out the others
    full_duplex: bool  # listens while it speaks (False: a cascade that answers after a pause)
    # Without a checkpoint it runs weights its packages ship (a checkpoint may bring larger
    # ones), not seeded random weights
    ships_weights: bool
    downloads: tuple[PublicCheckpoint, ...]  # what the Models page offers to fetch for it

    def check(self, request: ModelRequest) -> None:
        """Raise :class:`FamilyError` naming the fix if ``request`` cannot load (torch-free:
        folders and files only, so the settings dialog can call it)."""
        ...

    def footprint(self, request: ModelRequest) -> Footprint:
        """Where its weights are for ``request`` and what it needs (torch-free, quick)."""
        ...

    def load(self, request: ModelRequest, progress: Progress) -> LoadedModel:
        """Load, warm up and seal; reports ``("loading", 0..1)`` then ``("capture", 0..1)``."""
        ...


EagerGuard = Callable[[], "AbstractContextManager[None]"]  # a session's eager calls run under it


class SessionSource(Protocol):
    """A family's weights loaded once, opening many sessions on them (``engine.multiplex``).

    Each session :meth:`open` hands back has its own state (carry, rings, regions: sized by the
    declaration), its own voice and backbone (from its ``seed``), its own arm and its own replay
    engine whose eager calls run under ``eager_guard`` (the session's generator state); only
    the weights are shared. Call ``open`` with the session's generator state installed.
    """

    title: str
    period_s: float  # the native period every session keeps
    input_rate: int
    output_rate: int
    # How its sessions hold replay bindings among many (:meth:`open_multiplexed`), the
    # family's choice: "shared" (one set per multiplexer lane and voice, each session's state
    # copied in and out around its period) or "per-session" (each session captures its own).
    bindings: str

    def state_bytes(self, arm: Arm) -> int:
        """One session's state under ``arm``, as the declaration prices it."""
        ...

    def open(self, seed: int, arm: Arm, eager_guard: EagerGuard | None) -> LoadedModel:
        """A new session on its own bindings, warmed up and sealed."""
        ...

    def open_multiplexed(
        self, seed: int, arm: Arm, rng: SessionRng, voice: int | None = None
    ) -> LoadedModel:
        """A new session among many, the way the family runs them (:attr:`bindings`): called
        inside ``Multiplexer.admit`` (``rng`` installed, no period running); ``voice`` seeds
        its random voice where the family has one (default: ``seed``). Its ``warmup`` says
        ``bindings``: ``captured`` (shared bindings it made), ``shared`` (made by an earlier
        session: it captured nothing) or ``per-session``; its ``close`` frees its state."""
        ...


def session_source(face: Family, request: ModelRequest, progress: Progress) -> SessionSource:
    """``face``'s weights for ``request``, ready to open sessions; a :class:`FamilyError` when
    the family does not multiplex."""
    load = getattr(face, "load_sessions", None)
    if load is None:
        raise FamilyError(
            f"family {face.key} runs one session per process: for --sessions choose "
            "synthetic, lycheefd or moshi",
            "family",
        )
    source: SessionSource = load(request, progress)
    return source


def speech_decoder(face: Family, request: ModelRequest, progress: Progress) -> Any:
    """``face``'s speech decoder alone, under ``request``'s arm (``synth``: speech tokens in,
    speech out; the family's own model object, whose ``speech``, ``windower``, ``replay``,
    ``voice``, ``vocab``, ``binding`` and ``output_rate`` synth drives); a
    :class:`FamilyError` when the family has none."""
    load = getattr(face, "load_speech", None)
    if load is None:
        raise FamilyError(f"family {face.key} has no stand-alone speech decoder", "family")
    return load(request, progress)


def has_speech_decoder(face: Family) -> bool:
    """Whether :func:`speech_decoder` serves ``face`` (torch-free)."""
    return callable(getattr(face, "load_speech", None))


def voice_seconds(face: Family) -> tuple[float, float] | None:
    """The shortest and longest voice recording ``face`` takes, in seconds, from its declaration
    (torch-free); None where it takes no recording."""
    seconds = getattr(face, "voice_seconds", None)
    if seconds is None:
        return None
    limits: tuple[float, float] = seconds()
    return limits

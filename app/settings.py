"""User settings: one YAML file in the platform's config folder, validated with the fix named.

``load_settings`` reads ``settings.yaml`` (``settings_path()``: ``~/.config/duplexcadence/`` on
Linux); a missing file gives the defaults, a file that cannot be read or holds a bad value raises
:class:`SettingsError` naming the key, the value and the fix. ``save_settings`` writes atomically
(a temporary file in the same folder, then ``os.replace``), so a crash mid-save never leaves half
a file. ``check_settings`` checks what needs the file system or the machine (checkpoint folder,
voice WAV, CUDA) before a session is built: it is what the GUI calls to show an error.

Window geometry lives in QSettings (the GUI's business), not here; everything here is what a
trace header carries (``Settings.to_dict``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from adapters.face import FamilyError, ModelRequest, declared_voice_frames
from adapters.registry import DEFAULT_FAMILY, FALLBACK_FAMILY, family, family_keys
from engine.arms import Arm
from engine.files import atomic_write
from engine.safe_yaml import YamlError, read_yaml

__all__ = [
    "DEVICES",
    "FAMILIES",
    "MODEL_SIZES",
    "Settings",
    "SettingsError",
    "check_settings",
    "fall_back",
    "load_settings",
    "save_settings",
    "settings_path",
]

FAMILIES = family_keys()
MODEL_SIZES = ("auto", "full", "small")
DEVICES = ("auto", "cuda", "cpu")
SETTINGS_MAX_BYTES = 64 << 10  # a settings file holds a dozen short lines


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the key, the value and the fix."""


@dataclass
class Settings:
    """Everything a session is built from; the defaults talk with no checkpoint (the basic
    voice; :func:`fall_back` where its packages are missing)."""

    family: str = DEFAULT_FAMILY  # a key of adapters.registry
    model_size: str = "auto"  # full | small | auto (full on CUDA, small on CPU)
    checkpoint: Path | None = None  # its folder; None: seeded random weights (basic: its own)
    # A voice prompt: a recording (token2wav: a WAV, needs a checkpoint), or for PersonaPlex
    # also a checkpoint voice's name (NATF2); None = the family's default voice.
    voice: Path | None = None
    role: str | None = None  # PersonaPlex's role: a preset's name or free text; None = default
    voice_frames: int = dataclasses.field(default_factory=declared_voice_frames)
    trust_checkpoint_code: bool = False  # the user agreed to run the checkpoint folder's code
    device: str = "auto"  # auto | cuda | cpu
    arm: Arm = Arm.SRC
    audit: bool = False
    input_device: str | None = None  # by name; None = system default
    output_device: str | None = None
    host_api: str | None = None
    echo_cancel: bool = True  # applies only between two devices (speakers and a microphone)
    push_to_talk: bool = False
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML/JSON values (paths and the arm as strings)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, Path | Arm) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "settings") -> Settings:
        """Parse and validate values (unknown keys are errors: a typo must not pass silently)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SettingsError(
                f"{where}: unknown key {unknown[0]!r}; expected one of {', '.join(sorted(known))} "
                "(remove or rename it)"
            )
        values = {key: _parse(key, value, where) for key, value in data.items()}
        settings = cls(**values)
        _check_values(settings, where)
        return settings

    def resolved_device(self) -> str:
        """``auto`` made concrete: cuda when a CUDA device is present, else cpu."""
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def model_request(self, **overrides: Any) -> ModelRequest:
        """What these settings ask of their family, ``auto`` resolved (``overrides``: test and
        benchmark knobs such as ``n_steps`` or ``envelope``)."""
        device = self.resolved_device()
        fields = {
            "device": device,
            "model_size": self.resolved_model_size(device),
            "checkpoint": self.checkpoint,
            "voice": self.voice,
            "voice_frames": self.voice_frames,
            "role": self.role,
            "arm": self.arm,
            "audit": self.audit,
            "seed": self.seed,
            "trust_checkpoint_code": self.trust_checkpoint_code,
        }
        return ModelRequest(**{**fields, **overrides})

    def resolved_model_size(self, device: str | None = None) -> str:
        """``auto`` made concrete: full with a checkpoint (released weights are full size),
        else full on CUDA and small on CPU (real time on two cores)."""
        if self.model_size != "auto":
            return self.model_size
        if self.checkpoint is not None:
            return "full"
        device = device or self.resolved_device()
        return "full" if device.startswith("cuda") else "small"


_PATHS = ("checkpoint", "voice")
_OPTIONAL_TEXT = ("input_device", "output_device", "host_api", "role")
_BOOLS = ("audit", "echo_cancel", "push_to_talk", "trust_checkpoint_code")
_INTS = ("voice_frames", "seed")
MAX_SEED = 1 << 62  # torch and numpy take it (a seed plus a small offset stays under 2^63)


def _parse(key: str, value: Any, where: str) -> Any:
    """One value from YAML into its field's type, or a SettingsError with the fix."""
    if key in _PATHS or key in _OPTIONAL_TEXT:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise SettingsError(f"{where}: {key} = {value!r}: give a string or leave it empty")
        return Path(value).expanduser() if key in _PATHS else value
    if key in _BOOLS:
        if not isinstance(value, bool):
            raise SettingsError(f"{where}: {key} = {value!r}: give true or false")
        return value
    if key in _INTS:
        if not isinstance(value, int) or isinstance(value, bool):
            raise SettingsError(f"{where}: {key} = {value!r}: give an integer")
        return value
    if key == "arm":
        try:
            return Arm.parse(str(value))
        except ValueError as error:
            raise SettingsError(f"{where}: arm: {error}") from None
    if not isinstance(value, str):
        raise SettingsError(f"{where}: {key} = {value!r}: give a string")
    return value


def _check_values(s: Settings, where: str) -> None:
    """Checks that need nothing but the values themselves."""
    for key, allowed in (("family", FAMILIES), ("model_size", MODEL_SIZES), ("device", DEVICES)):
        if getattr(s, key) not in allowed:
            raise SettingsError(
                f"{where}: {key} = {getattr(s, key)!r}: expected one of {', '.join(allowed)}"
            )
    if s.voice_frames < 6 or s.voice_frames % 2:
        raise SettingsError(
            f"{where}: voice_frames = {s.voice_frames}: give an even number of prompt mel "
            f"frames >= 6 (two per prompt token; the default voice has {declared_voice_frames()})"
        )
    if not 0 <= s.seed <= MAX_SEED:
        raise SettingsError(f"{where}: seed = {s.seed:.3g}: give a non-negative integer up to 2^62")


def settings_path() -> Path:
    """``<user config dir>/duplexcadence/settings.yaml`` (``$XDG_CONFIG_HOME`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("duplexcadence")) / "settings.yaml"


def load_settings(path: Path | None = None) -> Settings:
    """The settings in ``path`` (default :func:`settings_path`); defaults when it is missing."""
    path = path or settings_path()
    if not path.exists():
        return Settings()
    try:
        data = read_yaml(path, max_bytes=SETTINGS_MAX_BYTES)
    except YamlError as error:
        raise SettingsError(
            f"{error}: fix it or delete the file to start from the defaults"
        ) from None
    if data is None:
        return Settings()
    if not isinstance(data, dict):
        raise SettingsError(
            f"{path} must hold a mapping of setting: value; delete it to start from the defaults"
        )
    return Settings.from_dict(data, where=str(path))


def save_settings(s: Settings, path: Path | None = None) -> Path:
    """Write ``s`` to ``path`` (default :func:`settings_path`) atomically; returns the path.

    A file there that does not read as settings (hand-edited into a broken state) is kept as
    ``settings.yaml.bak`` before it is replaced, so an edit is never lost silently.
    """
    _check_values(s, "settings")
    path = path or settings_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _back_up_if_broken(path)
        text = "# DuplexCadence settings (written by the app; edit while it is closed)\n"
        text += yaml.safe_dump(s.to_dict(), sort_keys=False, allow_unicode=True)
        atomic_write(path, lambda f: f.write(text), text=True)
    except OSError as error:
        raise SettingsError(
            f"cannot write settings to {path} ({error}): make {path.parent} writable"
        ) from None
    return path


def _back_up_if_broken(path: Path) -> Path | None:
    """Copy a settings file that does not load to ``<name>.bak`` (atomically); its path or None."""
    if not path.is_file():
        return None
    try:
        load_settings(path)
        return None
    except SettingsError:
        pass
    backup = path.with_name(path.name + ".bak")
    with open(path, "rb") as f:
        raw = f.read(SETTINGS_MAX_BYTES)  # a longer file is not settings: keep its head
    return atomic_write(backup, lambda f: f.write(raw))


def fall_back(s: Settings) -> tuple[Settings, str | None]:
    """The settings to run, and a line for the user when they had to change.

    The default family (the basic voice) needs optional packages; where they are missing, a
    default request (no checkpoint, no voice) runs the fallback family instead, seeded random
    weights, and the line says what is missing and how to install it. Torch-free.
    """
    if s.family != DEFAULT_FAMILY or s.checkpoint is not None or s.voice is not None:
        return s, None
    try:
        family(DEFAULT_FAMILY).check(ModelRequest())
    except FamilyError as error:
        line = f"{error}; until then the assistant has random weights (it answers with noise)"
        return dataclasses.replace(s, family=FALLBACK_FAMILY), line[0].upper() + line[1:]
    return s, None


def check_settings(s: Settings) -> None:
    """Everything a session needs from the machine, checked before loading; raises the fix.

    Torch is imported only for ``device = cuda``; the family's own checks (checkpoint folder,
    voice) are its face's ``check`` (torch-free), so the settings dialog can call this.
    """
    _check_values(s, "settings")
    if s.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SettingsError("device = cuda, but no CUDA device is present: choose cpu or auto")
    try:
        family(s.family).check(s.model_request())
    except FamilyError as error:
        raise SettingsError(str(error)) from None
    if s.echo_cancel:
        from app.audio.devices import AudioError
        from app.audio.echo import check_echo_cancel

        try:
            check_echo_cancel()
        except AudioError as error:
            raise SettingsError(f"echo_cancel = true: {error}") from None

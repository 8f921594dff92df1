"""PersonaPlex's checkpoint folder and model arguments, from its declaration (torch-free).

A download of ``nvidia/personaplex-7b-v1`` (gated: the user accepts the NVIDIA Open Model License
on Hugging Face and downloads it) holds Moshi's three files (:data:`MOSHI_FILE`, the Mimi
codec :data:`MIMI_FILE`, the text tokenizer :data:`TOKENIZER_FILE`) and the released voices,
``voices.tgz`` (or its ``voices/`` folder, extracted): one ``NAME.pt`` per voice (NATF0-3,
NATM0-3, VARF0-4, VARM0-4), each the voice's prompt as stored temporal inputs and the delay
cache they leave. Its ``config.json`` is not read: PersonaPlex's own loader builds the 7B from
built-in arguments too, which here are Moshi's with the declaration's ``dep_q`` and delays.

Every file is checked by its size and header before anything loads, as Moshi's folder is.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.moshi import config as moshi_config
from adapters.moshi.config import (
    MIMI_FILE,
    MOSHI_FILE,
    TOKENIZER_FILE,
    CheckpointError,
    DamagedFile,
    FolderFiles,
    MoshiSize,
    damaged,
)

if TYPE_CHECKING:
    from engine.contract import Declaration

__all__ = [
    "DEFAULT_ROLE",
    "DEFAULT_VOICE",
    "MAX_VOICE_S",
    "MIN_VOICE_S",
    "ROLES",
    "VOICES_FOLDER",
    "VOICES_TGZ",
    "PersonaPlexFiles",
    "check_folder",
    "delays",
    "lm_kwargs",
    "read_voice_member",
    "size_for",
]

VOICES_TGZ = "voices.tgz"
VOICES_FOLDER = "voices"
VOICE_SUFFIX = ".pt"
DEFAULT_VOICE = "NATF2"
MIN_VOICE_S = 0.5  # a shorter recording says too little of the voice
MAX_VOICE_S = 30.0  # a longer recording is refused: the prompt phase would keep the user waiting
# Role presets: the prompts PersonaPlex's README gives (its assistant, casual, service roles).
ROLES = {
    "assistant": (
        "You are a wise and friendly teacher. Answer questions or provide advice in a clear and "
        "engaging way."
    ),
    "casual": "You enjoy having a good conversation.",
    "service": (
        "You work for CitySan Services which is a waste management and your name is Ayelen "
        "Lucero. Information: Verify customer name Omar Torres. Current schedule: every other "
        "week. Upcoming pickup: April 12th. Compost bin service available for $8/month add-on."
    ),
    "astronaut": (
        "You enjoy having a good conversation. Have a technical discussion about fixing a reactor "
        "core on a spaceship to Mars. You are an astronaut on a Mars mission. Your name is Alex."
    ),
}
DEFAULT_ROLE = "assistant"
#: Moshi's small point; PersonaPlex's step keeps its own delay cache and constants beside Moshi's.
SMALL_POINT = {**moshi_config.SMALL_POINT, "position_bytes": 1781}


def size_for(name: str, declaration: Declaration) -> MoshiSize:
    """The size ``name`` (``full`` or ``small``) over PersonaPlex's declaration."""
    return moshi_config.size_for(name, declaration, SMALL_POINT)


@dataclass(frozen=True)
class PersonaPlexFiles:
    """A checkpoint folder's files: Moshi's three, and the voices by name (their files)."""

    files: FolderFiles
    voices: dict[str, str]  # voice name -> its member of voices.tgz or path under voices/

    @property
    def folder(self) -> Path:
        return self.files.folder


def check_folder(folder: Path) -> PersonaPlexFiles:
    """The folder's files and voices, or a :class:`CheckpointError` naming what is wrong."""
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise CheckpointError(
            f"PersonaPlex folder {folder} {problem}; it must contain {MOSHI_FILE}, {MIMI_FILE}, "
            f"{TOKENIZER_FILE} and {VOICES_TGZ}"
        )
    paths = [folder / name for name in (MOSHI_FILE, MIMI_FILE, TOKENIZER_FILE)]
    missing = [path.name for path in paths if not path.is_file()]
    if missing:
        raise CheckpointError(f"PersonaPlex folder {folder} lacks {', '.join(missing)}")
    for path in paths:
        if fault := damaged(path):
            raise DamagedFile(f"PersonaPlex file {path} {fault}")
    files = FolderFiles(folder, paths[0], paths[1], paths[2], lm_kwargs=None)
    return PersonaPlexFiles(files, _voices(folder))


def _voices(folder: Path) -> dict[str, str]:
    """The voices a folder offers: ``voices/*.pt``, else the ``.pt`` members of voices.tgz."""
    extracted = folder / VOICES_FOLDER
    if extracted.is_dir():
        return {p.stem: str(p) for p in sorted(extracted.glob(f"*{VOICE_SUFFIX}"))}
    archive = folder / VOICES_TGZ
    if not archive.is_file():
        return {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            names = [m.name for m in tar.getmembers() if m.isfile()]
    except (OSError, tarfile.TarError, EOFError) as error:
        raise DamagedFile(
            f"PersonaPlex file {archive} is not a readable .tgz ({error}): download it again"
        ) from None
    return {Path(n).stem: n for n in sorted(names) if n.endswith(VOICE_SUFFIX)}


def delays(point: dict[str, int]) -> list[int]:
    """The delay cache's lag per codebook: the text, then the agent's and the user's streams
    (each: its first codebook, then the rest), from the declaration."""
    stream = [point["first_delay"]] + [point["rest_delay"]] * (point["audio_q"] - 1)
    return [point["text_delay"], *stream, *stream]


def lm_kwargs(size: MoshiSize, base: dict[str, Any]) -> dict[str, Any]:
    """The LM's arguments: Moshi's (``base``, the vendor's 7B) at ``size``, with the declared
    depformer steps and delays; the folder's config.json is not read (see the module)."""
    kwargs = size.lm_kwargs(base, None)
    kwargs["n_q"] = 2 * size.point["audio_q"]
    kwargs["delays"] = delays(size.point)
    return kwargs


def read_voice_member(files: PersonaPlexFiles, name: str) -> bytes:
    """The bytes of voice ``name`` (a file under voices/ or a member of voices.tgz)."""
    where = files.voices[name]
    if Path(where).is_absolute():
        return Path(where).read_bytes()
    with tarfile.open(files.folder / VOICES_TGZ, "r:gz") as tar:
        member = tar.extractfile(where)
        if member is None:
            raise DamagedFile(f"{files.folder / VOICES_TGZ} has no file {where}: download it again")
        return member.read()

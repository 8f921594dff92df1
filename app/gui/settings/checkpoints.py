"""The public checkpoints a user may download from the Models page: their hub repositories, the
files the app needs from each, and the family that loads them. No Qt; torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.moshi.config import MIMI_FILE, MOSHI_FILE, TOKENIZER_FILE

__all__ = ["PUBLIC_CHECKPOINTS", "PublicCheckpoint"]


@dataclass(frozen=True)
class PublicCheckpoint:
    """A checkpoint a user may download: its hub repository and the files the app needs."""

    title: str
    repo_id: str
    patterns: tuple[str, ...]  # allow_patterns: only these files come down
    subfolder: str  # the checkpoint folder inside the download (Settings points at it)
    needs: str  # what comes down, in words
    family: str  # the family (adapters.registry key) that loads it
    gpu: bool = True  # it needs a CUDA GPU to run in real time (checked before downloading)

    @property
    def folder_name(self) -> str:
        """The download's folder inside the models folder: the repository's name."""
        return self.repo_id.split("/")[-1]


PUBLIC_CHECKPOINTS = (
    PublicCheckpoint(
        "MiniCPM-o 4.5 voice (Token2Wav)", "openbmb/MiniCPM-o-4_5",
        ("assets/token2wav/*",), "assets/token2wav",
        "its flow and vocoder (flow.yaml, flow.pt, hift_original.pt); real time needs a GPU",
        "synthetic",
    ),
    PublicCheckpoint(
        "Moshi (Kyutai) 7B", "kyutai/moshiko-pytorch-bf16",
        (MOSHI_FILE, MIMI_FILE, TOKENIZER_FILE), "",
        "the 7B in bf16, its Mimi codec and its text tokenizer", "moshi",
    ),
    PublicCheckpoint(
        "MiniCPM-o 4.5, the whole model", "openbmb/MiniCPM-o-4_5", ("*",), "",
        "the whole checkpoint: its weights, its own code and the Token2Wav voice", "minicpmo45",
    ),
)  # fmt: skip

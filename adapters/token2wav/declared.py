"""Which declaration a Token2Wav family reads, and what a flow declaration must state (torch-free).

:mod:`adapters.token2wav.binding` binds the flow to it (torch, through the catalogs and the
carry); :mod:`adapters.token2wav.voice_limits` reads a voice prompt's limits from it without torch,
so the command line's help and the face's checks quote the declaration's numbers.
"""

from __future__ import annotations

from engine.contract import Declaration, DeclarationError
from engine.declaration_io import load_declaration

__all__ = [
    "CARRY_REGION",
    "CONFORMER_REGION",
    "DECLARATIONS",
    "ESTIMATOR",
    "NEEDED",
    "check_flow_declaration",
    "flow_declaration",
]

DECLARATIONS = {"minicpmo45": "minicpmo45_token2wav", "lycheefd": "lycheefd_token2wav"}
CARRY_REGION = "estimator_att"  # the region the state rule holds as a carry (audit shadows it)
CONFORMER_REGION = "conformer_att"  # the conformer's attention cache: stock form in every arm
ESTIMATOR = "estimator"  # the operator whose catalog the replayed flow operators share
NEEDED = (
    "f_prompt",
    "frames_per_token",
    "samples_per_frame",
    "lookahead",
    "stride_tokens",
    "n_steps",
    "vocab",
    "hift_mel_cache",
)


def flow_declaration(family: str | Declaration) -> Declaration:
    """A family name (``minicpmo45``), a declaration name or path, or a loaded declaration."""
    if isinstance(family, Declaration):
        return family
    return load_declaration(DECLARATIONS.get(family, family))


def check_flow_declaration(decl: Declaration) -> None:
    """Raise ``DeclarationError`` naming what ``decl`` lacks of a Token2Wav flow's declaration."""
    missing = [name for name in NEEDED if name not in decl.operating_point]
    missing += [r for r in (CARRY_REGION, CONFORMER_REGION) if r not in decl.regions]
    if missing or ESTIMATOR not in decl.operators:
        raise DeclarationError(
            f"declaration {decl.name} lacks {', '.join(missing) or 'operators.' + ESTIMATOR}: a "
            f"Token2Wav flow declares {', '.join(NEEDED)}, the regions {CARRY_REGION} and "
            f"{CONFORMER_REGION} and the operator {ESTIMATOR}"
        )

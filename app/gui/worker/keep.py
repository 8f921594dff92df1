"""A model kept loaded between conversations (issue 21): Stop, then Start with the same family
and settings, reuses it instead of loading for half a minute again.

The controller holds one :class:`KeptModel` while idle and hands it to the next engine thread,
which reuses it when :func:`app.session.model_key` of the new settings is its key (the model is
reset in place: ``app.session.open_session``) and otherwise closes it before loading another, so
two models never share the memory. Closing it ends the model's own threads (the basic voice's
worker) before the process exits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.arms import Arm

if TYPE_CHECKING:
    from adapters.face import LoadedModel

__all__ = ["KeptModel"]


@dataclass
class KeptModel:
    """A loaded model, what it was loaded for (``key``) and the arms whose graphs it holds."""

    key: object  # app.session.model_key(settings)
    loaded: LoadedModel
    warmed: set[Arm] = field(default_factory=set)
    load_s: float = 0.0  # how long its load took (the window says what reuse saved)

    def close(self) -> None:
        """End the model's threads (idempotent); the model must not be used afterwards."""
        close, self.loaded.close = self.loaded.close, None
        if close is not None:
            close()

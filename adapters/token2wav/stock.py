"""The stock streaming path: the vendor's stream semantics around the flow model, made safe.

This is the *eager* arm's flow stage, value for value what minicpmo-utils 1.0.7 streams
(``Token2wav.set_stream_cache`` / ``stream`` with its two cache trims), so the other arms have a
baseline to equal bit for bit:

* set-up runs the prompt tokens plus the prompt's first 3 tokens as lookahead (1.0.7's
  ``set_stream_cache``) with the prompt mel as condition;
* every chunk runs ``flow.inference_chunk`` then BOTH retention trims, keeping "prompt + 100":
  the estimator cache holds new frames FIRST (the DiT prepends), so it keeps ``H[:P] ‖ H[-100:]``
  on dim 4; the conformer cache holds new frames LAST and packs token-rate rows twice, so it keeps
  ``H[:P] ‖ H[-100:]`` per rate on dim 3 (token rate at half the frame counts);
* a turn reset restores a clone of the prompt-only state.

Allocation is the vendor's (a fresh ``torch.cat`` per trim), with one deliberate difference: the
vendor's stock caches alias decoder buffers (``estimator_cnn_cache`` *is* the CFM's
``cnn_cache_buffer``, an untrimmed ``estimator_att_cache`` is a view of ``att_cache_buffer``), so
any other call on the same module would overwrite a paused stream. Here every state tensor that
shares storage with a module buffer is copied out after the call: same values, owned by the stream.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from adapters.token2wav.flow import CausalMaskedDiffWithXvec, FlowCache

RETAINED_FRAMES = 100  # "prompt + 100": the vendor's retained history, in mel frames
MAX_CALL_TOKENS = 28  # MiniCPM-o's largest call: 25 new + 3 lookahead tokens (56 mel frames)


def trim_estimator_cache(
    att: Tensor, prompt_frames: int, retained: int = RETAINED_FRAMES
) -> Tensor:
    """Keep ``att[..., :P, :] ‖ att[..., -retained:, :]`` on dim 4 once it exceeds ``P + retained``.

    Newest-first layout, so this keeps the newest ``P`` frames and the oldest ``retained`` (the
    vendor's 1.0.7 ``_trim_estimator_cache``). Returns ``att`` itself when no trim is due.
    """
    if att.shape[4] <= prompt_frames + retained:
        return att
    return torch.cat([att[:, :, :, :, :prompt_frames], att[:, :, :, :, -retained:]], dim=4)


def trim_conformer_cache(
    att: Tensor, prompt_frames: int, token_depth: int, retained: int = RETAINED_FRAMES
) -> Tensor:
    """Keep the prompt and the newest ``retained`` frames of each rate (oldest-first, dim 3).

    Rows ``:token_depth`` are token-rate caches packed as ``[c ‖ c]``: trim one copy at half the
    frame counts and repack; the other rows are mel rate. Returns ``att`` when no trim is due.
    """
    if att.shape[3] <= prompt_frames + retained:
        return att
    token = att[:token_depth, :, :, : att.shape[3] // 2]
    token = torch.cat(
        [
            token[:, :, :, : prompt_frames // 2],
            token[:, :, :, token.shape[3] - retained // 2 :],
        ],
        dim=3,
    )
    mel = torch.cat(
        [
            att[token_depth:, :, :, :prompt_frames],
            att[token_depth:, :, :, att.shape[3] - retained :],
        ],
        dim=3,
    )
    return torch.cat([token.repeat(1, 1, 1, 2, 1), mel], dim=0)


class StockStream:
    """One speaker's flow stream on the stock path: ``chunk`` per token window, ``reset`` per turn.

    ``prompt_tokens [1, n]`` (int), ``prompt_mel [1, 2·n, 80]`` and ``spk [1, 192]`` live on the
    flow's device. ``state`` is the stream's current cache (owned tensors, see the module doc).
    """

    def __init__(
        self,
        flow: CausalMaskedDiffWithXvec,
        prompt_tokens: Tensor,
        prompt_mel: Tensor,
        spk: Tensor,
        *,
        n_timesteps: int = 10,
        max_call_tokens: int = MAX_CALL_TOKENS,
    ) -> None:
        assert prompt_tokens.dim() == 2 and prompt_tokens.shape[0] == 1, (
            f"prompt_tokens must be [1, n], got {tuple(prompt_tokens.shape)}"
        )
        lookahead = flow.pre_lookahead_len
        assert prompt_tokens.shape[1] >= lookahead, (
            f"the prompt needs at least {lookahead} tokens: its first ones are the set-up lookahead"
        )
        self.flow = flow
        self.spk = spk
        self.n_timesteps = n_timesteps
        self.max_call_tokens = max_call_tokens
        self.prompt_frames = prompt_mel.shape[1]
        with torch.no_grad():
            tokens = torch.cat([prompt_tokens, prompt_tokens[:, :lookahead]], dim=1)
            cache = flow.setup_cache(tokens, prompt_mel, spk, n_timesteps)
        self._prompt_state = {key: value.clone() for key, value in cache.items()}
        self.state: FlowCache = {}
        self.reset()

    def reset(self) -> None:
        """Turn reset: back to a clone of the prompt-only state (the prompt state stays intact)."""
        self.state = {key: value.clone() for key, value in self._prompt_state.items()}

    def chunk(self, tokens: Tensor, last_chunk: bool = False) -> Tensor:
        """Synthesize one call's mel ``[1, 80, frames]`` and advance the stream.

        ``tokens [1, t]``: a non-final call ends with ``pre_lookahead_len`` lookahead tokens and
        needs ``t > pre_lookahead_len``; at most ``max_call_tokens``. An empty final call advances
        nothing and returns an empty mel (the vendor then only flushes its vocoder).
        """
        self._check_call(tokens, last_chunk)
        if tokens.shape[1] == 0:
            return self.state["conformer_cnn_cache"].new_zeros(
                1, self.flow.encoder_proj.out_features, 0
            )
        with torch.no_grad():
            mel, cache = self.flow.inference_chunk(
                tokens, self.spk, self.state, last_chunk, self.n_timesteps
            )
            cache["estimator_att_cache"] = trim_estimator_cache(
                cache["estimator_att_cache"], self.prompt_frames
            )
            cache["conformer_att_cache"] = trim_conformer_cache(
                cache["conformer_att_cache"], self.prompt_frames, len(self.flow.encoder.encoders)
            )
            self.state = {key: self._owned(value) for key, value in cache.items()}
            return self._owned(mel)

    def _check_call(self, tokens: Tensor, last_chunk: bool) -> None:
        count = tokens.shape[-1]
        assert tokens.dim() == 2 and tokens.shape[0] == 1, (
            f"tokens must be [1, t], got {tuple(tokens.shape)}; a stream synthesizes one batch row"
        )
        lookahead = self.flow.pre_lookahead_len
        if not last_chunk and count <= lookahead:
            raise ValueError(
                f"a non-final chunk needs new tokens plus {lookahead} lookahead tokens, got "
                f"{count}; send more tokens or pass last_chunk=True"
            )
        if count > self.max_call_tokens:
            raise ValueError(
                f"a call takes at most {self.max_call_tokens} tokens (the admission bound), got "
                f"{count}; split it into calls of at most {self.max_call_tokens}"
            )

    def _owned(self, tensor: Tensor) -> Tensor:
        """``tensor``, or a copy of it where it shares storage with a module buffer."""
        if tensor.untyped_storage().data_ptr() in _buffer_storages(self.flow):
            return tensor.clone()
        return tensor


def _buffer_storages(module: nn.Module) -> frozenset[int]:
    return frozenset(buffer.untyped_storage().data_ptr() for buffer in module.buffers())

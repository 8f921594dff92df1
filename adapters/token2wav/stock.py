"""The stock streaming path: the vendor's stream semantics around the flow model, made safe.

This is the *eager* arm's flow stage, value for value what minicpmo-utils 1.0.7 streams
(``Token2wav.set_stream_cache`` / ``stream`` with its two cache trims), so the other arms have a
baseline to equal bit for bit:

* set-up runs the prompt tokens plus the prompt's first 3 tokens as lookahead (1.0.7's
  ``set_stream_cache``) with the prompt mel as condition;
* every chunk runs ``flow.inference_chunk`` then BOTH retention trims the declaration states,
  keeping "prompt + ``f_retained``" (100): the estimator cache holds new frames FIRST (the DiT
  prepends), so it keeps ``H[:P] ‖ H[-100:]`` on its clock axis (the declared newest-first rule,
  ``RetentionRule.apply``); the conformer cache holds new frames LAST and packs token-rate rows
  twice, so it keeps ``H[:P] ‖ H[-100:]`` per rate (token rate at half the frame counts);
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

from adapters.token2wav.binding import FlowBinding
from adapters.token2wav.flow import CausalMaskedDiffWithXvec, FlowCache
from engine.carry import RetentionRule


def trim_conformer_cache(att: Tensor, retention: RetentionRule, token_depth: int) -> Tensor:
    """The conformer cache's declared retention (oldest first: ``H[:P] ‖ H[-R:]`` on its clock
    axis) applied per rate, once it exceeds ``P + R``; returns ``att`` when no trim is due.

    Rows ``:token_depth`` are token-rate caches packed as ``[c ‖ c]``: trim one copy at half the
    frame counts and repack; the other rows are mel rate (the vendor's 1.0.7
    ``_trim_conformer_cache``).
    """
    dim, prompt, retained = retention.dim, retention.prompt, retention.history
    extent = att.shape[dim]
    if extent <= retention.bound:
        return att
    token = att[:token_depth].narrow(dim, 0, extent // 2)
    half = token.shape[dim]
    token = torch.cat(
        [token.narrow(dim, 0, prompt // 2), token.narrow(dim, half - retained // 2, retained // 2)],
        dim=dim,
    )
    mel = att[token_depth:]
    mel = torch.cat(
        [mel.narrow(dim, 0, prompt), mel.narrow(dim, extent - retained, retained)], dim=dim
    )
    repeats = [1] * att.dim()
    repeats[dim] = 2
    return torch.cat([token.repeat(*repeats), mel], dim=0)


class StockStream:
    """One speaker's flow stream on the stock path: ``chunk`` per token window, ``reset`` per turn.

    ``prompt_tokens [1, n]`` (int), ``prompt_mel [1, 2·n, 80]`` and ``spk [1, 192]`` live on the
    flow's device; ``binding`` holds the declared retention, call bound and solver steps.
    ``state`` is the stream's current cache (owned tensors, see the module doc).
    """

    def __init__(
        self,
        flow: CausalMaskedDiffWithXvec,
        prompt_tokens: Tensor,
        prompt_mel: Tensor,
        spk: Tensor,
        *,
        binding: FlowBinding,
    ) -> None:
        assert prompt_tokens.dim() == 2 and prompt_tokens.shape[0] == 1, (
            f"prompt_tokens must be [1, n], got {tuple(prompt_tokens.shape)}"
        )
        lookahead = binding.lookahead
        assert prompt_tokens.shape[1] >= lookahead, (
            f"the prompt needs at least {lookahead} tokens: its first ones are the set-up lookahead"
        )
        check_binding(flow, prompt_mel, binding)
        self.flow, self.spk, self.binding = flow, spk, binding
        with torch.no_grad():
            tokens = torch.cat([prompt_tokens, prompt_tokens[:, :lookahead]], dim=1)
            cache = flow.setup_cache(tokens, prompt_mel, spk, binding.n_steps)
        self._prompt_state = {key: value.clone() for key, value in cache.items()}
        self.state: FlowCache = {}
        self.reset()

    @property
    def prompt_state(self) -> FlowCache:
        """The prompt-only state every turn starts from (read it, copy it: never write it)."""
        return self._prompt_state

    def reset(self) -> None:
        """Turn reset: back to a clone of the prompt-only state (the prompt state stays intact).
        The old state is dropped first: never two whole states at once."""
        self.state = {}
        self.state = {key: value.clone() for key, value in self._prompt_state.items()}

    def stock_state(self) -> FlowCache:
        """The state (already the stock representation): a :class:`~.states.FlowState`."""
        return self.state

    def load(self, state: FlowCache) -> None:
        """Take over ``state`` (its tensors are the caller's to give: not written here)."""
        self.state = state

    def chunk(self, tokens: Tensor, last_chunk: bool = False) -> Tensor:
        """Synthesize one call's mel ``[1, 80, frames]`` and advance the stream.

        ``tokens [1, t]``: a non-final call ends with the declared lookahead tokens and needs
        ``t > lookahead``; at most the declared ``max_call_tokens``. An empty final call advances
        nothing and returns an empty mel (the vendor then only flushes its vocoder).
        """
        check_call(tokens, last_chunk, self.binding)
        if tokens.shape[1] == 0:
            return self.state["conformer_cnn_cache"].new_zeros(
                1, self.flow.encoder_proj.out_features, 0
            )
        with torch.no_grad():
            mel, cache = self.flow.inference_chunk(
                tokens, self.spk, self.state, last_chunk, self.binding.n_steps
            )
            # The previous state dies here, before the trims and copies allocate, as it does in
            # the vendor's ``mel, self.stream_cache = inference_chunk(...)``: kept to the end of
            # the call it would hold a second whole state (~800 MB at full size) at the peak.
            self.state = cache
            cache["estimator_att_cache"] = self.binding.carry.apply(cache["estimator_att_cache"])
            cache["conformer_att_cache"] = trim_conformer_cache(
                cache["conformer_att_cache"],
                self.binding.conformer,
                len(self.flow.encoder.encoders),
            )
            self.state = {key: self._owned(value) for key, value in cache.items()}
            return self._owned(mel)

    def _owned(self, tensor: Tensor) -> Tensor:
        """``tensor``, or a copy of it where it shares storage with a module buffer."""
        if tensor.untyped_storage().data_ptr() in _buffer_storages(self.flow):
            return tensor.clone()
        return tensor


def _buffer_storages(module: nn.Module) -> frozenset[int]:
    return frozenset(buffer.untyped_storage().data_ptr() for buffer in module.buffers())


def check_binding(flow: CausalMaskedDiffWithXvec, prompt_mel: Tensor, binding: FlowBinding) -> None:
    """The flow and the voice are the ones the binding was made for (vocabulary, lookahead,
    frames per token, prompt P)."""
    vocab = flow.input_embedding.num_embeddings
    if vocab != binding.vocab:
        raise ValueError(
            f"declaration {binding.declaration} states a vocabulary of {binding.vocab} speech "
            f"tokens, the flow embeds {vocab}: load the flow its declaration states"
        )
    if flow.up_rate != binding.frames_per_token:
        raise ValueError(
            f"declaration {binding.declaration} states {binding.frames_per_token} mel frames a "
            f"token, the flow upsamples by {flow.up_rate}: load the flow its declaration states"
        )
    if flow.pre_lookahead_len != binding.lookahead:
        raise ValueError(
            f"declaration {binding.declaration} states lookahead {binding.lookahead}, the flow's "
            f"pre_lookahead_len is {flow.pre_lookahead_len}: load the flow its declaration states"
        )
    if prompt_mel.shape[1] != binding.prompt_frames:
        raise ValueError(
            f"the voice has {prompt_mel.shape[1]} prompt frames, the binding "
            f"{binding.prompt_frames}: bind the flow at the voice's frames (bind_flow(family, P))"
        )


def check_call(tokens: Tensor, last_chunk: bool, binding: FlowBinding) -> None:
    """Admission of a call's size, with the fix in the message (the declaration's predicate)."""
    count, lookahead, most = tokens.shape[-1], binding.lookahead, binding.max_call_tokens
    if tokens.dim() != 2 or tokens.shape[0] != 1:
        raise ValueError(
            f"tokens must be [1, t], got {tuple(tokens.shape)}; a stream synthesizes one batch row"
        )
    if not last_chunk and count <= lookahead:
        raise ValueError(
            f"a non-final chunk needs new tokens plus {lookahead} lookahead tokens, got "
            f"{count}; send more tokens or pass last_chunk=True"
        )
    if count > most:
        raise ValueError(
            f"a call takes at most {most} tokens (the admission bound), got {count}; "
            f"split it into calls of at most {most}"
        )

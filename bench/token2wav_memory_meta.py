"""Full-size memory accounting of the flow streams without a GPU: live tensor bytes on ``meta``.

    python3 bench/token2wav_memory_meta.py --arm eager|S|vendor [--chunks 6] [--turn 4]

The model is built at the released sizes on the CPU, moved to the ``meta`` device (shapes only,
no arithmetic) and streamed at the declaration's operating point (its default voice's prompt
length P, its steady windows; the family's seeded random voice, as the benchmark's) under
``tests.live_bytes.LiveBytes``: the bytes the CUDA allocator would count as allocated, in the
memory phase's scope (weights included, peak reset once they are loaded). ``vendor`` streams
minicpmo-utils 1.0.7's flow with its own trims, as ``bench/token2wav_peers.py`` does. A few
seconds of CPU per chunk; the GPU adds ~46 MiB (cuBLAS workspace, allocator rounding).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.token2wav import stock
from adapters.token2wav.binding import bind_flow
from adapters.token2wav.checkpoint import load_token2wav
from adapters.token2wav.stream import FlowStream
from bench.token2wav import FAMILY, VALUES, add_prompt_tokens, vendor_prompt, voice
from engine.arms import Arm
from engine.replay import ReplayEngine
from engine.sizes import MIB
from tests.live_bytes import LiveBytes

META = "meta"


def _owned(self: stock.StockStream, tensor: torch.Tensor) -> torch.Tensor:
    """``StockStream._owned`` by storage identity: every meta storage has data_ptr 0."""
    buffers = {b.untyped_storage()._cdata for b in self.flow.buffers()}
    return tensor.clone() if tensor.untyped_storage()._cdata in buffers else tensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arm", default="eager", help="an arm without replay, or vendor")
    parser.add_argument("--chunks", type=int, default=6)
    parser.add_argument("--turn", type=int, default=4)
    add_prompt_tokens(parser)
    args = parser.parse_args()
    stock.StockStream._owned = _owned  # type: ignore[method-assign]
    vendor = args.arm == "vendor"
    arm = Arm.EAGER if vendor else Arm.parse(args.arm)
    flow: Any
    flow, hift = load_token2wav(None, envelope=not arm.state_rule, device="cpu" if vendor else META)
    if vendor:
        from tests.oracle.vendor import vendor_flow, vendor_token2wav

        flow, hift, trims = vendor_flow(flow).to(META), hift.to(META), vendor_token2wav()
    tokens, mel, spk = voice(args.prompt_tokens, device=META)
    window = torch.zeros(1, VALUES["tokens_per_call"], dtype=torch.int32, device=META)
    live = LiveBytes()
    for module in (flow, hift):
        for tensor in (*module.parameters(), *module.buffers()):
            live._see(tensor.untyped_storage())
    weights = live.current
    live.reset_peak()
    # As the benchmark runs each side: the vendor's set-up under inference_mode, ours under
    # no_grad (a stream's regions are ordinary tensors; its chunks enter inference_mode).
    with live, torch.inference_mode() if vendor else torch.no_grad():
        if vendor:
            prompt, state = vendor_prompt(flow, tokens, mel, spk)
        else:
            binding = bind_flow(FAMILY, mel.shape[1])
            replay = ReplayEngine(META, enabled=False)
            stream = FlowStream(flow, tokens, mel, spk, binding=binding, arm=arm, replay=replay)
        held = live.current - weights
        for i in range(args.chunks):
            if vendor:
                if i and i % args.turn == 0:
                    state.stream_cache = {k: v.clone() for k, v in prompt.items()}
                _, state.stream_cache = flow.inference_chunk(
                    token=window, spk=spk, cache=state.stream_cache
                )
                trims._trim_estimator_cache(state, mel.shape[1])
                trims._trim_conformer_cache(state, mel.shape[1])
            else:
                if i % args.turn == 0:
                    stream.reset()
                stream.chunk(window)
    figures = {"weights": weights, "held_before_streaming": held, "peak_allocated": live.peak}
    print(", ".join(f"{k}_mib {v / MIB:.1f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()

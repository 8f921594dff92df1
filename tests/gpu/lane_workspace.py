"""Two replay engines' graphs on one lane (one side stream), the first engine then dropped: do the
second's graphs stay whole?

Every graph captured on a stream bakes in the address of that stream's cuBLAS workspace, and
torch's ``CUDAGraph.reset`` (run when a graph is destroyed) frees that stream's workspace
(``clearCublasWorkspacesForStream``, pytorch/pytorch#193402), even while other graphs captured
on the stream live. A multiplexer lane's sessions capture on one stream, so closing one session
(``Multiplexer.close``) is exactly that. Run as ``python -m tests.gpu.lane_workspace`` (a
fault kills the process, so the GPU test runs it in its own): it prints ``ok`` when, after the
first engine is gone, the second's replays still equal eager and leave memory allocated since
on that stream untouched, before and after the allocator's cache is emptied.
"""

from __future__ import annotations

import functools
import gc

import torch
from torch import Tensor

from engine.graph_lane import GraphLane, on_lane
from engine.replay import ReplayEngine, ReplayOp
from engine.signature import Catalog

# Skinny GEMMs over a long K: cuBLAS splits K and keeps the partial sums in its workspace.
SHAPES = ((16, 16384, 128), (64, 8192, 512), (8, 32768, 64))
FILL = 3.0


def product(x: Tensor, w: Tensor) -> Tensor:
    return x @ w


def captured_ops(
    engine: ReplayEngine, weights: list[Tensor], inputs: list[Tensor]
) -> list[ReplayOp]:
    ops = [
        engine.register(f"mm{i}", functools.partial(product, w=w), catalog=Catalog.any())
        for i, w in enumerate(weights)
    ]
    with torch.no_grad():
        for _ in range(3):
            for op, x in zip(ops, inputs, strict=True):
                op(x)
    assert all(op.counters.captures == 1 for op in ops), [op.counters for op in ops]
    return ops


def main() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator().manual_seed(5)
    weights = [torch.randn(k, n, generator=g).to(device, torch.bfloat16) for _, k, n in SHAPES]
    inputs = [torch.randn(m, k, generator=g).to(device, torch.bfloat16) for m, k, _ in SHAPES]
    eager = [x @ w for x, w in zip(inputs, weights, strict=True)]
    lane = GraphLane(device)
    with on_lane(lane):
        first, second = ReplayEngine(device), ReplayEngine(device)
    dropped = captured_ops(first, weights, inputs)
    kept = captured_ops(second, weights, inputs)
    del first, dropped
    gc.collect()  # the first engine's graphs are reset: the lane stream's workspace is freed
    torch.cuda.synchronize()
    with torch.cuda.stream(lane.stream):  # what the lane's next session would allocate there
        filler = [torch.full((1 << 21,), FILL, device=device) for _ in range(64)]  # 8 MiB each
    for _ in range(3):
        with torch.no_grad():
            outs = [op(x) for op, x in zip(kept, inputs, strict=True)]
        torch.cuda.synchronize()
        assert all(torch.equal(o, e) for o, e in zip(outs, eager, strict=True)), "not eager's"
    assert all(bool((f == FILL).all()) for f in filler), "a replay wrote into a later tensor"
    del filler
    torch.cuda.empty_cache()  # a freed workspace goes back to the driver
    with torch.no_grad():
        outs = [op(x) for op, x in zip(kept, inputs, strict=True)]
    torch.cuda.synchronize()
    assert all(torch.equal(o, e) for o, e in zip(outs, eager, strict=True)), "not eager's"
    assert all(op.counters.hits >= 4 for op in kept), [op.counters for op in kept]
    print("ok")


if __name__ == "__main__":
    main()

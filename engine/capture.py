"""ExactShapeReplay's effect probe, capture and recovery from a failed capture.

``engine/replay.py`` decides when; this module runs the probationary call that classifies a
class's effects, captures a graph, and cleans up completely when a capture fails.

CUDA-graph rules encoded here (see ENGINEERING.md and FACTS.md):

- Static buffers are allocated OUTSIDE capture, in the ordinary caching allocator, so no graph's
  private pool owns them and no later capture recycles them. Only outputs and temporaries of the
  captured callable live in the engine's shared pool.
- The device generator is snapshotted before capture and restored after, so the first replay
  draws what eager would have drawn at that point (the capture itself draws nothing).
- Capture is thread-local (``capture_error_mode="thread_local"``): only this thread's calls
  that a capture forbids fail it, so a multiplexer's other lanes replay on their own streams
  while a session is opened on one (``engine.graph_lane``: turns). This thread still must not
  sync or touch the legacy stream while capturing.
- Python's cyclic garbage collector is off while capturing: a collection there could free an
  older graph held in a reference cycle (a dropped engine), and destroying a graph is not
  permitted while the stream captures (the capture fails). ``torch.cuda.graph`` runs
  ``gc.collect()`` before every capture for the same reason; switching the collector off costs
  nothing per capture, and the garbage is collected after it.
- A failed capture is cleaned up completely: the capture is ended, the pool is handed back to the
  allocator, the partial graph is reset, the default CUDA generator is taken out of any capturing
  state (older torch leaves it there: "Offset increment outside graph capture encountered
  unexpectedly" on the next draw) and restored to its snapshot; a test draw proves it usable.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from engine.replay_parts import Binding, CaptureFailed

__all__ = ["Effects", "capture_graph", "probe_effects"]


# -- the effect probe -------------------------------------------------------------------------


class Effects(NamedTuple):
    """Which generators a probationary call consumed."""

    host: tuple[str, ...]  # names of consumed host generators
    device: bool  # the device's default generator advanced


def _generator_states(device: torch.device | None) -> dict[str, Any]:
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "random": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if device is not None:
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b))
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def probe_effects(
    device: torch.device | None,
    run: Callable[[Callable[..., Any], Any, Any], Any],
    fn: Callable[..., Any],
    args: Any,
    kwargs: Any,
) -> tuple[Any, Effects]:
    """Run ``run(fn, args, kwargs)`` once, watching the host generators (torch CPU, ``random``,
    numpy's global) and, with a CUDA ``device``, its default generator. No rewind: the probe
    is the real call. Without CUDA the torch CPU generator counts as host randomness."""
    before = _generator_states(device)
    out = run(fn, args, kwargs)
    after = _generator_states(device)
    host = tuple(k for k in ("torch", "random", "numpy") if not _same(before[k], after[k]))
    moved = device is not None and not _same(before["cuda"], after["cuda"])
    return out, Effects(host, moved)


# -- capture and recovery --------------------------------------------------------------------


def capture_graph(
    binding: Binding,
    fn: Callable[..., Any],
    device: torch.device,
    stream: torch.cuda.Stream,
    pool: Any,
) -> int:
    """Capture ``fn`` on the binding's static inputs into ``binding.graph``/``binding.outputs``.

    Returns the capture's memory: the drop of ``torch.cuda.mem_get_info`` free bytes across it
    (clamped at 0, so summed counters stay monotonic). Leaves the device generator where it was.
    Raises :class:`CaptureFailed` after a full cleanup if anything in the capture raised.
    """
    rng = torch.cuda.get_rng_state(device)
    torch.cuda.synchronize(device)
    free_before = torch.cuda.mem_get_info(device)[0]
    graph = torch.cuda.CUDAGraph()
    error: BaseException | None = None
    ended = False
    outputs: Any = None
    collecting = gc.isenabled()
    gc.disable()  # no collection inside the capture (module docstring)
    with torch.no_grad(), torch.cuda.stream(stream):
        try:
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        except Exception as exc:
            error = exc
        else:
            try:
                outputs = fn(*binding.static_args, **binding.static_kwargs)
            except Exception as exc:
                error = exc
            try:
                graph.capture_end()
                ended = True
            except Exception as exc:
                error = error or exc
        finally:
            if collecting:
                gc.enable()
    if error is not None:
        del outputs  # partial outputs point into the abandoned capture's pool
        raise CaptureFailed(error, _recover(graph, ended, device, stream, pool, rng)) from error
    torch.cuda.synchronize(device)
    used = max(0, free_before - torch.cuda.mem_get_info(device)[0])
    torch.cuda.set_rng_state(rng, device)
    binding.graph, binding.outputs = graph, outputs
    return used


def _recover(
    graph: torch.cuda.CUDAGraph,
    ended: bool,
    device: torch.device,
    stream: torch.cuda.Stream,
    pool: Any,
    rng: Tensor,
) -> str | None:
    """Undo a failed capture; returns what could not be recovered (None when all is well)."""
    problems = []
    if not ended:
        # capture_end threw before handing the pool back to the allocator: without this the
        # allocator keeps routing allocations through a filter that points into the dead graph.
        end_pool = getattr(torch._C, "_cuda_endAllocateToPool", None)
        try:
            if end_pool is not None:
                end_pool(device.index, pool)
        except RuntimeError:
            pass  # not recording to the pool any more: nothing to undo
        # The pool's use count taken at capture_begin is deliberately NOT released: releasing
        # it twice would free memory the engine's other graphs still replay into.
    try:
        graph.reset()
    except Exception as exc:
        problems.append(f"graph reset: {type(exc).__name__}: {exc}")
    del graph
    with torch.cuda.stream(stream):
        if torch.cuda.is_current_stream_capturing():
            problems.append("the capture stream is still capturing")
    try:
        _heal_generator(device, stream)
        torch.cuda.set_rng_state(rng, device)
        torch.empty(4, device=device).uniform_()  # a draw outside capture must work again
        torch.cuda.set_rng_state(rng, device)
        torch.cuda.synchronize(device)
    except Exception as exc:
        problems.append(f"device generator: {type(exc).__name__}: {exc}")
    return "; ".join(problems) or None


def _heal_generator(device: torch.device, stream: torch.cuda.Stream) -> None:
    """Run one tiny, successful capture: its prologue/epilogue take the default generator out
    of a capturing state an aborted capture left it in. Harmless where torch keys capture
    state by capture id (>= 2.13)."""
    scratch = torch.zeros(1, device=device)
    healer = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        healer.capture_begin(capture_error_mode="thread_local")
        scratch.add_(1)
        healer.capture_end()
    torch.cuda.synchronize(device)
    del healer

"""The exactness phases of ``bench/minicpmo45.py``: extent, exact (window events), vendor.

Not a bench of its own: ``bench/minicpmo45.py`` runs these on its loaded session
(:class:`bench.minicpmo45.Session`), each phase written to its JSON as it ends.

* :func:`extent_cost` — one LLM decode step replayed at the carry's full capacity and at 512
  slots (the same weights and kernels, only the attended extent differs), under the declared
  SDPA backend and under ``math``, with each kernel choice (``vendor``, ``fused``): device ms
  per step, and the kernels one step launches.
* :func:`exact` — per seed, one conversation of the talk under each arm (eager twice first for
  the first seed: eager must reproduce itself), with a barge-in, a new conversation and the
  vendor's basic sliding window set low (so slides happen). Per unit: the LLM's token ids, the
  speech tokens handed over, and, to place a PCM difference, the digest of the device generator's
  state at the unit's start (``rng``), of each Token2Wav call's mel (``mel``) and of the PCM.
  Every arm must equal eager on each; the first differing unit is named per key.
* :func:`vendor_agreement` — the vendor's own backbone against ours (eager) on the same weights
  and seed, greedy text and sampled: token agreement and the first divergence.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from app.demo import talk_periods
from engine.arms import Arm

KEYS = ("ids", "speech", "rng", "mel", "pcm", "phase")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def rng_digest(cuda: bool) -> str:
    """The generator the vocoder draws from: the device's (CUDA) or the host's."""
    state = torch.cuda.get_rng_state() if cuda else torch.get_rng_state()
    return digest(state.numpy().tobytes())


@contextmanager
def mel_digests(session: Any) -> Iterator[list[str]]:
    """Each Token2Wav call's mel digest while the block runs (the flow stream's ``chunk``)."""
    flow = session.loaded.model.synthesizer.flow
    inner = flow.chunk
    seen: list[str] = []

    def chunk(tokens: torch.Tensor, last_chunk: bool = False) -> torch.Tensor:
        mel: torch.Tensor = inner(tokens, last_chunk)
        seen.append(digest(mel.detach().float().cpu().numpy().tobytes()))
        return mel

    flow.chunk = chunk
    try:
        yield seen
    finally:
        del flow.chunk  # the class's method again


def conversation(
    session: Any,
    arm: Arm,
    seed: int,
    talk: list[np.ndarray],
    *,
    barge_at: int = -1,
    new_at: int = -1,
) -> list[dict[str, Any]]:
    """One conversation from a new start under ``arm``; per unit the digests of :data:`KEYS`."""
    session.fresh(arm, seed)
    units: list[dict[str, Any]] = []
    with mel_digests(session) as mels:
        for i, mic in enumerate(talk):
            if i == new_at:
                session.loop.reset()
                torch.manual_seed(seed + 1000)
            if i == barge_at:
                session.backbone.interrupt()
            rng = rng_digest(session.cuda)
            mels.clear()
            unit = session.unit(mic, False)
            units.append({
                "phase": "speak" if unit["spoke"] else "listen",
                "ids": unit["text"], "speech": unit["speech"], "rng": rng,
                "mel": list(mels), "pcm": digest(unit["pcm"]), "unit_s": unit["seconds"],
            })  # fmt: skip
    return units


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Unit-by-unit equality of :data:`KEYS`; the first differing unit of each."""
    first = {
        k: next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x[k] != y[k]), None)
        for k in KEYS
    }
    return {"units": min(len(a), len(b)), "equal": all(v is None for v in first.values()),
            "first_difference": first}  # fmt: skip


def exact(
    session: Any,
    arms: list[Arm],
    seeds: list[int],
    *,
    units: int,
    again_units: int,
    barge_at: int,
    new_at: int,
    window: tuple[int, int],
    log: Callable[[str], None],
    write: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Every arm against eager (eager first reproduces itself), across the window events."""
    config = session.duplex.decoder._window_config
    marks = (config.basic_window_high_tokens, config.basic_window_low_tokens)
    config.basic_window_high_tokens, config.basic_window_low_tokens = window
    out: dict[str, Any] = {"window": list(window), "barge_at": barge_at, "new_at": new_at}
    rules = session.rules
    try:
        for seed in seeds:
            talk = talk_periods(units, seed)
            runs: dict[str, list[dict[str, Any]]] = {}
            again = ["eager-again"] if seed == seeds[0] and again_units > 0 else []
            order = ["eager", *again, *[str(a) for a in arms if a is not Arm.EAGER]]
            for name in order:
                arm = Arm.EAGER if name.startswith("eager") else Arm.parse(name)
                heard = talk[:again_units] if name == "eager-again" else talk
                runs[name] = conversation(
                    session, arm, seed, heard, barge_at=barge_at, new_at=new_at
                )
                st = rules.stats() if rules is not None else {}
                cmp = compare(runs["eager"], runs[name])
                window_stats = st.get("window", {})
                out[f"seed{seed}/{name}"] = cmp | {
                    "speaking_units": sum(u["phase"] == "speak" for u in runs[name]),
                    "slides": window_stats.get("slides"), "fallbacks": st.get("fallbacks"),
                    "replay": st.get("replay"), "sampled": st.get("sampled"),
                }  # fmt: skip
                log(
                    f"exact seed {seed} {name}: equal={cmp['equal']} {cmp['first_difference']}"
                    f" slides={window_stats.get('slides')}"
                )
                write(out)
    finally:
        config.basic_window_high_tokens, config.basic_window_low_tokens = marks
    return out


def agreement(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Token agreement of the LLM's ids and the speech tokens, and where they first part."""
    out: dict[str, Any] = {}
    for key in ("ids", "speech"):
        flat_a = [(i, t) for i, u in enumerate(ours) for t in u[key]]
        flat_b = [(i, t) for i, u in enumerate(theirs) for t in u[key]]
        n = min(len(flat_a), len(flat_b))
        same = sum(x[1] == y[1] for x, y in zip(flat_a, flat_b, strict=False))
        first = next((j for j in range(n) if flat_a[j][1] != flat_b[j][1]), None)
        out[key] = {
            "tokens": n, "agree": same, "first_divergence_token": first,
            "first_divergence_unit": flat_a[first][0] if first is not None else None,
        }  # fmt: skip
    out["phases_equal"] = [u["phase"] for u in ours] == [u["phase"] for u in theirs]
    return out


def vendor_agreement(session: Any, seed: int, units: int) -> dict[str, Any]:
    """Our backbone (eager) against the vendor's own on the same talk: greedy, then sampled."""
    out: dict[str, Any] = {}
    talk = talk_periods(units, seed)
    duplex, rules = session.duplex, session.rules
    generate = duplex.streaming_generate
    for greedy in (True, False):
        if greedy:
            duplex.streaming_generate = functools.partial(generate, decode_mode="greedy")
        try:
            ours = conversation(session, Arm.EAGER, seed, talk)
            rules.use_vendor(True)
            try:
                theirs = conversation(session, Arm.EAGER, seed, talk)
            finally:
                rules.use_vendor(False)
        finally:
            duplex.streaming_generate = generate
        out["greedy" if greedy else "sampled"] = agreement(ours, theirs)
    return out


def extent_cost(
    rules: Any, device: str, steps: int, kernels: list[str], backends: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One LLM decode step replayed attending 512 slots and the carry's full capacity (the
    extents' ends; same weights and carry), under the declared SDPA backend, each of
    ``backends`` and ``math`` (``"<extent>/<backend>"``), with each kernel choice in
    ``kernels`` (keys ``"<kernels>:..."``; ``fused`` only where the family loaded with it: its
    load joined the weights, which the ``vendor`` step reads through the modules' views): device
    ms per step, CUDA events; and per kernel choice the kernels one step launches
    (``kernel_count``: ATen ops dispatched plus the compiled pieces' kernels) and its first
    call's seconds (compiles)."""
    from adapters.minicpmo45.fused_step import DECODES
    from adapters.minicpmo45.kernel_count import count_call
    from adapters.minicpmo45.kv import KVCarry
    from adapters.minicpmo45.llm_step import CarryStep
    from engine.replay import ReplayEngine
    from engine.signature import Catalog

    llm = rules.decoder.m
    out: dict[str, Any] = {}
    cuda = device.startswith("cuda")
    capacity = rules.llm_carry.capacity
    layers = len(llm.model.layers)
    for choice in kernels:
        if choice == "fused" and rules.kernels != "fused":
            # joining the weights now would free the storage the load's graphs read
            out["fused:skipped"] = "the family was loaded with vendor kernels: list fused last"
            continue
        for backend in dict.fromkeys((rules.backend, *backends, "math")):
            # "flex" / "sdpa": the declared backend with that decode attention; the declared
            # backend: the family's own decode attention; any other: that backend with sdpa
            sdpa = rules.backend if backend in DECODES else backend
            decode = backend if backend in DECODES else "sdpa"
            decode = rules.decode if backend == rules.backend else decode
            step = CarryStep(
                llm.model, capacity, sdpa, head=llm.lm_head, kernels=choice, decode=decode,
                block=rules.spec.round_to,
            )  # fmt: skip
            n_layers, _, heads, cap, dim = step.carry_shape()
            dtype = rules.llm_carry.buffer.dtype
            carry = KVCarry(n_layers, heads, cap, dim, dtype=dtype, device=device)
            for extent in dict.fromkeys((capacity, min(512, capacity))):
                engine = ReplayEngine(device)
                op = engine.register(
                    "extent", step.logits, catalog=Catalog.any(), aliased=["buffer"]
                )
                x = torch.randn(1, 1, int(llm.config.hidden_size), dtype=dtype, device=device)
                pos = torch.tensor([[extent // 2]], device=device)
                with torch.no_grad():
                    t0 = time.perf_counter()
                    step.logits(x, pos, pos[0], carry.buffer, extent)  # compiles (fused)
                    first_s = time.perf_counter() - t0
                    for _ in range(3):
                        op(x, pos, pos[0], carry.buffer, extent)
                    if cuda:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        op(x, pos, pos[0], carry.buffer, extent)
                    if cuda:
                        torch.cuda.synchronize()
                    ms = (time.perf_counter() - t0) * 1e3 / steps
                key = str(extent) if backend == rules.backend else f"{extent}/{backend}"
                out[f"{choice}:{key}"] = {
                    "ms_per_step": round(ms, 3), "first_call_s": round(first_s, 2),
                    "replay": op.counters.to_dict(),
                }  # fmt: skip
                if backend == rules.backend and extent == min(512, capacity):
                    try:
                        counted = count_call(
                            functools.partial(step.logits, x, pos, pos[0], carry.buffer, extent)
                        )
                    except Exception as error:  # a count that fails is reported, not fatal
                        counted = {"error": f"{type(error).__name__}: {error}"[:300]}
                    counted["layers"] = layers
                    out[f"{choice}:kernel_count"] = counted
                del engine, op
            del carry
        if rules.tts_step is not None and rules.tts_carry is not None:
            try:
                out[f"{choice}:tts_kernel_count"] = _tts_count(rules, choice, device)
            except Exception as error:  # a count that fails is reported, not fatal
                out[f"{choice}:tts_kernel_count"] = {"error": f"{type(error).__name__}: {error}"}
    return out


def _tts_count(rules: Any, choice: str, device: str) -> dict[str, Any]:
    """The kernels of one TTS head step (1 token, attending the carry's first extent) with
    ``choice``, on a carry of its own."""
    from adapters.minicpmo45.kernel_count import count_call
    from adapters.minicpmo45.kv import KVCarry
    from adapters.minicpmo45.llm_step import CarryStep

    core = rules.tts_step.core
    step = CarryStep(
        core, rules.tts_carry.capacity, rules.backend, kernels=choice, decode=rules.decode,
        block=rules.spec.round_to,
    )  # fmt: skip
    layers, _, heads, cap, dim = step.carry_shape()
    dtype = rules.tts_carry.buffer.dtype
    carry = KVCarry(layers, heads, cap, dim, dtype=dtype, device=device)
    extent = rules.tts_carry.extents[0]
    x = torch.randn(1, 1, int(core.config.hidden_size), dtype=dtype, device=device)
    pos = torch.tensor([[extent // 2]], device=device)
    call = functools.partial(step.hidden, x, pos, pos[0], carry.buffer, extent)
    with torch.inference_mode():  # as generate_chunk calls it
        call()  # compiles (fused)
        counted = count_call(call)
    return counted | {"layers": layers}

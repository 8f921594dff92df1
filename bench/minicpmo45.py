"""MiniCPM-o 4.5's 1-s unit on its real model code with random weights: stages, exactness, peers.

    python3 bench/minicpmo45.py --code .vendor/minicpmo45 --out OUT/minicpmo45_h200.json   # GPU
    python3 bench/minicpmo45.py --code DIR --out /tmp/m.json --device cpu --size tiny --units 4

``--code`` is a folder with the model's public code (``bench/kit.sh`` makes it in
``.vendor/minicpmo45``: OpenBMB/MiniCPM-o-Demo ``MiniCPMO45/`` with the ``as_duplex`` shim). It is
never committed; the GPU machine gets it, and transformers 4.51.0 as wheels in ``.whl/``, through
the device tool's ``carry``. No hub: the checkpoint folder is written here (``--work``, by default
in ``/dev/shm`` where it exists: ~17 GB at the released shapes, written and read back in memory).

The checkpoint: the code, a ``config.json`` at ``--size`` (``tiny``: a 2-layer LLM of width 64, a
1-layer audio encoder and TTS; ``released``: Qwen3-8B, Whisper-medium encoder, a 20-layer TTS, as
far as the public code states them), random bf16 weights made by the folder's own model class, and
(for a ``full`` decoder) ``assets/token2wav`` with our Token2Wav's seeded random weights at the
released sizes. It is loaded through the family face as the app loads it (consent given, warm-up).

Phases (``--phases``, in this order), each written to ``--out`` as it ends (a run cut by the
device limit keeps what it measured); ``extent``, ``exact`` and ``vendor`` are in
``bench/minicpmo45_exact.py`` and run where the family's backbone rules are installed:

0. ``extent``: one replayed LLM decode step at the carry's full capacity against 512 slots,
   with each of ``--kernels`` (``vendor``, ``fused``): ms per step and kernels per step.
1. ``arms``: each arm in ``--arms`` (eager first: it loads the stock envelope, so every arm can be
   switched to live) runs the same talk from a new conversation, re-seeded: ``--settle`` units
   (a replay arm captures there), then ``--units`` counted units, every one speaking (random
   weights speak every unit: the worst case), then ``--listen`` counted units forced to listen
   (the vendor's own ``force_listen_count``). Twice, each pass a new conversation: the first
   splits every unit into ``audio_encoder``, ``llm_prefill``, ``llm_decode``, ``tts_head`` (the
   checkpoint's code or the family's rules, whichever runs; device synchronized at each stage's
   edges) and ``token2wav`` (our synthesis span); the second times the unit as the app runs it,
   without those synchronizes (``unit``; the first pass's is ``unit_clocked``), and must give the
   same outputs. p50/p95/p99 of each; peak memory from an emptied cache; the text tokens, speech
   tokens and PCM of every unit compared with eager's (``torch.equal`` / bytes).
1b. ``exact``: eager, eager again (reproducible) and each of ``--exact-arms`` over
   ``--exact-units`` with a barge-in, a new conversation and the LLM cache's window slides; per
   unit the ids, speech tokens, generator state, each call's mel and the PCM against eager's.
1c. ``vendor``: the vendor's own backbone against ours, greedy and sampled: token agreement.
2. ``floor``: one settled eager speaking unit and one listening unit under torch.profiler: the
   summed device time of their kernels (the exact-replay floor), per stage and in all.
3. ``peers`` on the same weights, Token2Wav under ``--peer-arm``: the vendor's own loop (its
   ``StreamDecoder`` with a ``DynamicCache``, HF eager), the vendor's ``torch.compile`` path as
   its ``docs/en/compile.md`` configures it (``llm.model`` and ``tts.model`` compiled with
   ``mode="default", dynamic=True``, TF32 matmuls), and HF ``StaticCache`` + ``torch.compile``
   (``mode="reduce-overhead"``) on the LLM's one-token step. Each: the same figures, and token
   agreement with eager (units equal, the first divergence). The last runs only in a process
   that captures no graph of ours (``--arms eager --peer-arm eager``): inductor's graph trees
   clear every stream's cuBLAS workspace around each recording, and our graphs keep the
   workspace address they were captured with.

Response latency (end of the user's speech to first audio) per arm and peer: from the talk's
schedule, each unit starting when its second of audio is in and the previous unit is done.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.face import ModelRequest
from adapters.minicpmo45.folder import TOKEN2WAV_FOLDER
from adapters.minicpmo45.rules import KERNELS_ENV
from adapters.registry import family
from app.demo import talk_periods
from bench.env_info import environment
from bench.minicpmo45_exact import exact, extent_cost, vendor_agreement
from engine.arms import Arm
from engine.duplex import DuplexLoop, PeriodOutcome
from engine.metrics import Metrics
from engine.sizes import MIB

VOCAB = 151748  # the released tokenizer's ids (vocab.json + added tokens) end at 151747
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {
        "llm": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32},
        "audio": {"d_model": 64, "encoder_layers": 1, "encoder_attention_heads": 2,
                  "encoder_ffn_dim": 256},
        "tts": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
                "num_hidden_layers": 1, "num_key_value_heads": 2},
    },
    "released": {
        "llm": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128},
        "audio": {"d_model": 1024, "encoder_layers": 24, "encoder_attention_heads": 16,
                  "encoder_ffn_dim": 4096},
        "tts": {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
                "num_hidden_layers": 20, "num_key_value_heads": 12},
    },
}  # fmt: skip
CODE_FILES = (
    *("*.py", "vocab.json", "merges.txt", "*tokenizer*.json", "special_tokens_map.json"),
    *("added_tokens.json", "preprocessor_config.json", "generation_config.json"),
)


def config(size: str) -> dict[str, Any]:
    """``config.json`` of a random-weight checkpoint at ``size``."""
    s = SIZES[size]
    return {
        "architectures": ["MiniCPMO"],
        "auto_map": {
            "AutoConfig": "configuration_minicpmo.MiniCPMOConfig",
            "AutoModel": "modeling_minicpmo.MiniCPMO",
        },
        "model_type": "minicpmo",
        "vocab_size": VOCAB,
        **s["llm"],
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
        "init_vision": False,
        "init_audio": True,
        "init_tts": True,
        "audio_pool_step": 5,
        "audio_chunk_length": 1.0,
        "audio_config": {
            **s["audio"], "decoder_layers": 1, "decoder_attention_heads": 2,
            "decoder_ffn_dim": 256, "num_mel_bins": 80, "max_source_positions": 1500,
        },
        "tts_config": {
            **s["tts"], "llm_dim": s["llm"]["hidden_size"], "num_audio_tokens": 6562,
            "num_text_tokens": VOCAB, "audio_bos_token_id": 151687, "text_eos_token_id": 151692,
            "projector_type": "mlp", "backbone_model": "llama", "num_vq": 1,
            "audio_tokenizer_type": "s3tokenizer_step_audio", "max_position_embeddings": 4096,
        },
    }  # fmt: skip


IMPORT_ONLY = ("librosa", "flag_gems")
"""Modules the public code imports only where the duplex path never goes (``librosa`` loads a
reference audio path in ``get_sys_prompt``; ``flag_gems`` only with ``USE_FLAGOS=1``), but which
transformers' import check wants to find: where absent, an empty module stands in (a fake at an
import boundary, recorded in the result)."""


def stand_in_imports() -> list[str]:
    """Put an empty module in place of each absent :data:`IMPORT_ONLY` name. Each has a spec:
    transformers asks ``importlib.util.find_spec`` about ``librosa``, which raises for a module
    without one."""
    import importlib.machinery
    import importlib.util
    import types

    missing = [name for name in IMPORT_ONLY if importlib.util.find_spec(name) is None]
    for name in missing:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
    return missing


def write_checkpoint(code: Path, folder: Path, size: str, device: str, seed: int) -> float:
    """Code, config and random bf16 safetensors weights in ``folder``; seconds it took."""
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    for pattern in CODE_FILES:
        for path in code.glob(pattern):
            shutil.copy2(path, folder / path.name)
    (folder / "config.json").write_text(json.dumps(config(size), indent=2))
    cfg = AutoConfig.from_pretrained(folder, trust_remote_code=True, local_files_only=True)
    cls = get_class_from_dynamic_module("modeling_minicpmo.MiniCPMO", str(folder))
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = cls(cfg)
    finally:
        torch.set_default_dtype(previous)
    model.save_pretrained(folder, safe_serialization=True)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return time.perf_counter() - t0


RELEASED_FLOW_YAML = """\
flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec
    input_size: 512
    output_size: 80
    spk_embed_dim: 192
    output_type: 'mel'
    vocab_size: 6561
    encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2
        input_size: 512
        output_size: 512
        input_layer: 'linear'
        pre_lookahead_len: 3
        num_blocks: 6
        num_up_blocks: 4
        up_stride: 2
        up_scale_factor: 2
        attention_heads: 8
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        key_bias: true
        linear_units: 2048
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: true
    decoder: !new:cosyvoice2.flow.flow_matching.CausalConditionalCFM
        inference_cfg_rate: 0.7
        estimator: !new:cosyvoice2.flow.decoder_dit.DiT
            in_channels: 320
            out_channels: 80
            mlp_ratio: 4.0
            depth: 16
            num_heads: 8
            head_dim: 64
            hidden_size: 512
"""  # the released flow.yaml's values (FACTS.md), in its format


def write_token2wav(folder: Path, seed: int) -> None:
    """A Token2Wav folder at the released sizes with seeded random weights (no voice models)."""
    from adapters.token2wav.checkpoint import load_token2wav

    folder.mkdir(parents=True, exist_ok=True)
    flow, hift = load_token2wav(None, seed=seed, envelope=False)
    (folder / "flow.yaml").write_text(RELEASED_FLOW_YAML)
    torch.save(flow.state_dict(), folder / "flow.pt")
    hift_state = {f"generator.{key}": value for key, value in hift.state_dict().items()}
    torch.save(hift_state, folder / "hift_original.pt")


PHASES = ("extent", "arms", "exact", "vendor", "floor", "peers")
"""The phases in the order they run (``--phases`` picks some)."""
STAGES = ("audio_encoder", "llm_prefill", "llm_decode", "tts_head")
SPLIT = (*STAGES, "token2wav")


def quantiles(values: list[float]) -> dict[str, float]:
    """p50/p95/p99/max in ms of values in seconds."""
    a = np.asarray(values, dtype=np.float64) * 1e3
    if a.size == 0:
        return {}
    q = {f"p{k}_ms": round(float(np.quantile(a, k / 100)), 2) for k in (50, 95, 99)}
    return q | {"max_ms": round(float(a.max()), 2), "n": int(a.size)}


def stage_seconds(outcome: PeriodOutcome, name: str) -> float:
    spans = outcome.record.spans
    return float(sum(s["dur_us"] for s in spans if s["name"] == name and s["depth"] == 0)) / 1e6


class StageClock:
    """Wall time of the backbone's stages in each unit: wrappers (instance attributes) around the
    duplex object's audio encoder, its decoder's ``feed`` and ``decode``, and the TTS head's
    ``generate_chunk``, whichever code sits there (the vendor's, or the family's rules). A
    ``feed`` counts as ``llm_prefill`` inside ``streaming_prefill`` and as ``llm_decode`` inside
    ``streaming_generate``. The device is synchronized at each stage's edges (the vendor's loop
    synchronizes every token anyway, by ``.item()``); each stage is also a profiler range."""

    def __init__(self, duplex: Any, cuda: bool) -> None:
        self.duplex, self.cuda = duplex, cuda
        self.unit = dict.fromkeys(STAGES, 0.0)
        self.phase = "llm_prefill"
        self._wrapped: list[tuple[Any, str, Any, Any]] = []  # owner, name, its own, wrapper

    def install(self) -> None:
        """Wrap what is there now; again after a switch put other code in place (idempotent)."""
        d = self.duplex
        self._wrap(d, "streaming_prefill", None, "llm_prefill")
        self._wrap(d, "streaming_generate", None, "llm_decode")
        self._wrap(d.model, "get_audio_embedding_streaming", "audio_encoder", None)
        self._wrap(d.decoder, "feed", "", None)
        self._wrap(d.decoder, "decode", "llm_decode", None)
        self._wrap(d.model.tts, "generate_chunk", "tts_head", None)

    def uninstall(self) -> None:
        """Put back what :meth:`install` wrapped (the unit then runs as the app runs it: one
        synchronize, at the period's end)."""
        for owner, name, own, wrapper in reversed(self._wrapped):
            if vars(owner).get(name) is not wrapper:
                continue  # a switch put other code there since, itself wrapped later
            if own is None:
                del vars(owner)[name]  # the class's method again
            else:
                setattr(owner, name, own)
        self._wrapped.clear()

    def take(self) -> dict[str, float]:
        """This unit's seconds per stage; zeroed for the next."""
        unit, self.unit = self.unit, dict.fromkeys(STAGES, 0.0)
        return unit

    def _wrap(self, owner: Any, name: str, stage: str | None, phase: str | None) -> None:
        inner = getattr(owner, name)
        if getattr(inner, "_stage_clock", None) is self:
            return
        clock = self

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if phase is not None:
                clock.phase = phase
                return inner(*args, **kwargs)
            where = stage or clock.phase
            clock._sync()
            t0 = time.perf_counter()
            with torch.profiler.record_function(f"stage:{where}"):
                out = inner(*args, **kwargs)
                clock._sync()
            clock.unit[where] += time.perf_counter() - t0
            return out

        wrapped._stage_clock = self  # type: ignore[attr-defined]
        self._wrapped.append((owner, name, vars(owner).get(name), wrapped))
        setattr(owner, name, wrapped)

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def speech_ends(units: int, seed: int) -> list[float]:
    """Seconds into the talk where each of the user's utterances ends (the demo's schedule)."""
    from app.demo import RATE, talk_parts

    ends, at = [], 0
    for k, part in enumerate(talk_parts(units, seed)):
        at += part.size
        if k % 2 == 1 and part.size:  # parts: silence, utterance, pause, utterance, ...
            ends.append(at / RATE)
    return [e for e in ends if e < units]


def response_latency(processing: list[float], spoke: list[bool], ends: list[float]) -> list[float]:
    """End of each utterance to the first audio after it: unit k's second is in at k + 1 s, and
    its work starts then or when unit k - 1's ends, whichever is later; a speaking unit's audio
    is out when its work ends."""
    done, finish = 0.0, []
    for k, seconds in enumerate(processing):
        done = max(float(k + 1), done) + seconds
        finish.append(done)
    latencies = []
    for end in ends:
        first = next((finish[k] for k in range(int(end), len(finish)) if spoke[k]), None)
        if first is not None:
            latencies.append(first - end)
    return latencies


class Session:
    """The loaded model, its loop and what each unit produced."""

    def __init__(self, loaded: Any, args: argparse.Namespace) -> None:
        self.loaded, self.args = loaded, args
        self.cuda = args.device.startswith("cuda")
        self.backbone = loaded.model.backbone
        self.duplex = self.backbone.duplex
        self.rules = getattr(self.backbone, "rules", None)  # the family's backbone rules, if any
        if getattr(args, "greedy", False):  # the vendor's greedy text decoding, every arm and peer
            self.duplex.streaming_generate = functools.partial(
                self.duplex.streaming_generate, decode_mode="greedy"
            )
        self.clock = StageClock(self.duplex, self.cuda)
        self.metrics = Metrics(loaded.model.period_s, device=args.device, arm=str(args.arms[0]))
        self.loop = DuplexLoop(loaded.model, self.metrics, loaded.replay, None)
        n = args.settle + args.units + args.listen
        self.talk = talk_periods(n, args.seed)
        self.ends = [e - args.settle for e in speech_ends(n, args.seed) if e >= args.settle]

    def conversation(self, arm: Arm, label: str) -> dict[str, Any]:
        """A new conversation under ``arm``, re-seeded: settle, counted speaking units, counted
        listening units; then the same conversation again, new and re-seeded, without the
        stage clock. The split is the first pass's; each unit's time is the second's, as the app
        runs it (the clock's synchronizes at every stage edge, ~2 a token, keep the host from
        running ahead of the device). Figures and every counted unit's outputs."""
        args = self.args
        warmed = self.fresh(arm, args.seed)
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
        n, listening = args.settle + args.units + args.listen, args.settle + args.units
        units = [self._logged(label, k, self.unit(self.talk[k], k >= listening)) for k in range(n)]
        self.fresh(arm, args.seed)
        plain = [
            self._logged(label, k, self.unit(self.talk[k], k >= listening, clocked=False))
            for k in range(n)
        ]
        self.clock.install()
        same = all(
            (a["text"], a["speech"], a["pcm"]) == (b["text"], b["speech"], b["pcm"])
            for a, b in zip(units, plain, strict=True)
        )
        counted = units[args.settle :]
        speak = [u for u in counted if not u["forced_listen"]]
        listen_units = [u for u in counted if u["forced_listen"]]
        plain_speak = [u for u in plain[args.settle :] if not u["forced_listen"]]
        plain_listen = [u for u in plain[args.settle :] if u["forced_listen"]]
        figures: dict[str, Any] = {
            "unclocked_equal_clocked": same,
            "speaking_unit": {
                "unit": quantiles([u["seconds"] for u in plain_speak]),
                "unit_clocked": quantiles([u["seconds"] for u in speak]),
                **{s: quantiles([u["split"][s] for u in speak]) for s in SPLIT},
                "spoke": sum(u["spoke"] for u in speak),
                "decode_tokens_p50": float(np.median([len(u["text"]) for u in speak] or [0])),
                "speech_tokens_p50": float(np.median([len(u["speech"]) for u in speak] or [0])),
            },
            "listening_unit": {
                "unit": quantiles([u["seconds"] for u in plain_listen]),
                "unit_clocked": quantiles([u["seconds"] for u in listen_units]),
                **{s: quantiles([u["split"][s] for u in listen_units]) for s in SPLIT},
                "spoke": sum(u["spoke"] for u in listen_units),
            },
            "response_latency": quantiles(
                response_latency(
                    [u["seconds"] for u in plain_speak],
                    [u["spoke"] for u in plain_speak],
                    self.ends,
                )
            ),
        }
        if warmed:
            figures["switch_warmup"] = warmed
        if self.cuda:
            figures["peak_allocated_mib"] = round(torch.cuda.max_memory_allocated() / MIB)
            figures["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / MIB)
            # what was held before the first unit: the weights and, in a peer's run, our
            # backbone's carries and captured graphs too, which the vendor's loop does not use
            figures["allocated_at_start_mib"] = round(start / MIB)
        if self.rules is not None and callable(getattr(self.rules, "stats", None)):
            stats = self.rules.stats()
            carry = stats.get("carry") or {}
            figures["backbone_carries_mib"] = round(
                sum(v for k, v in carry.items() if k.endswith("_bytes")) / MIB
            )
            figures["rules"] = {
                k: stats.get(k) for k in ("replay", "fallbacks", "sampled", "window", "carry")
            }
        print(label, json.dumps(figures), file=sys.stderr)
        return {"figures": figures, "units": units}

    @staticmethod
    def _logged(label: str, k: int, unit: dict[str, Any]) -> dict[str, Any]:
        """``unit`` after a progress line (a compile peer's first units take minutes)."""
        print(f"{label} unit {k}: {unit['seconds']:.3f} s", file=sys.stderr, flush=True)
        return unit

    def fresh(self, arm: Arm, seed: int) -> list[dict[str, Any]]:
        """A new conversation under ``arm`` from the same state as every other, re-seeded (the
        family's new conversation resets the model's session: its audio encoder's cache too).
        The switch is made here, before the first unit: a switch into a replay arm not yet
        captured warms the catalog (the family's period model), outside the units' timing and
        the exact phase's digests. Returns what such warm-ups did."""
        model = self.loaded.model
        warmups = getattr(model, "warmups", [])
        before = len(warmups)
        self.loop.request_arm(arm)
        self.loop.reset()
        if model.arm != arm:
            model.set_arm(arm)  # the loop then finds it made
        torch.manual_seed(seed)
        if callable(getattr(self.rules, "reset_stats", None)):
            self.rules.reset_stats()  # the rules' counters from this conversation on
        done = list(warmups[before:])
        for warmup in done:
            print("switch warm-up", json.dumps(warmup), file=sys.stderr, flush=True)
        return done

    def unit(self, mic: np.ndarray, listen: bool, clocked: bool = True) -> dict[str, Any]:
        """One unit through the loop; ``listen``: the vendor's forced listen for this unit;
        ``clocked``: split into stages by the :class:`StageClock` (synchronizing at each
        stage's edges), else as the app runs it (its split then has ``token2wav`` alone)."""
        duplex = self.duplex
        forced = duplex.force_listen_count
        if listen:  # the vendor forces listen while its count of generate calls is under this
            duplex.force_listen_count = duplex._streaming_generate_count + 1
        if clocked:
            self.clock.install()
        else:
            self.clock.uninstall()
        self.clock.take()
        before = len(duplex.total_ids)
        try:
            outcome = self.loop.step(mic)
        finally:
            duplex.force_listen_count = forced
        handoffs = self.backbone._handoffs
        speech = handoffs[0].tokens.flatten().tolist() if handoffs else []
        split = self.clock.take() | {"token2wav": stage_seconds(outcome, "synthesis")}
        return {
            "seconds": outcome.record.processing_s,
            "split": split,
            "text": [int(t) for t in duplex.total_ids[before:]],
            "speech": [int(t) for t in speech],
            "pcm": np.asarray(outcome.pcm).tobytes(),
            "spoke": bool(outcome.calls),  # a Token2Wav call: audio out in this unit
            "forced_listen": listen,
        }


def agreement(units: list[dict[str, Any]], reference: list[dict[str, Any]]) -> dict[str, Any]:
    """Units whose text tokens, speech tokens and PCM equal the reference's; the first
    divergence (unit, what, index)."""
    equal = {"text": 0, "speech": 0, "pcm": 0, "all": 0}
    first: dict[str, Any] | None = None
    for k, (u, r) in enumerate(zip(units, reference, strict=True)):
        same = {key: u[key] == r[key] for key in ("text", "speech", "pcm")}
        for key, ok in same.items():
            equal[key] += ok
        equal["all"] += all(same.values())
        if first is None and not all(same.values()):
            what = next(key for key, ok in same.items() if not ok)
            index = None
            if what != "pcm":
                pairs = zip(u[what], r[what], strict=False)
                index = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
                if index is None:
                    index = min(len(u[what]), len(r[what]))
            first = {"unit": k, "what": what, "index": index}
    return {"units": len(units), "equal": equal, "first_divergence": first}


def floor(session: Session, listen: bool) -> dict[str, Any]:
    """Summed device time of one eager unit's kernels (torch.profiler), per stage and in all."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        unit = session.unit(session.talk[session.args.settle], listen)
    events = prof.events()
    ranges = [
        (e.name.removeprefix("stage:"), e.time_range.start, e.time_range.end)
        for e in events
        if e.name.startswith("stage:") and e.device_type == torch.autograd.DeviceType.CPU
    ]
    device = [
        e
        for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA  # kernels, copies, sets
        and not getattr(e, "is_user_annotation", False)  # not a range's shadow on the GPU
        and not e.name.startswith("stage:")
    ]
    per = dict.fromkeys((*STAGES, "other"), 0.0)
    count = dict.fromkeys(per, 0)
    by_name: dict[str, list[float]] = {}
    for e in device:
        where = next((r[0] for r in ranges if r[1] <= e.time_range.start < r[2]), "other")
        per[where] += e.time_range.elapsed_us() / 1e3
        count[where] += 1
        mine = by_name.setdefault(f"{where}: {e.name[:90]}", [0, 0.0])
        mine[0] += 1
        mine[1] += e.time_range.elapsed_us() / 1e3
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:25]
    return {
        "floor_ms": round(sum(per.values()), 2),
        "per_stage_ms": {k: round(v, 2) for k, v in per.items()},
        "per_stage_kernels": count,
        "top_kernels": {name: {"n": n, "ms": round(ms, 2)} for name, (n, ms) in top},
        "kernels": len(device),
        "unit_ms_profiled": round(unit["seconds"] * 1e3, 2),
    }


@contextmanager
def vendor_mode(session: Session) -> Iterator[None]:
    """The vendor's own loop for the block (the family's rules off, where they exist)."""
    rules = session.rules
    if rules is None or not callable(getattr(rules, "use_vendor", None)):
        yield
        return
    rules.use_vendor(True)
    try:
        yield
    finally:
        rules.use_vendor(False)


@contextmanager
def vendor_compile(session: Session) -> Iterator[None]:
    """The vendor's ``apply_torch_compile`` (``modeling_minicpmo_unified.py``) on this model:
    ``llm.model`` and ``tts.model`` compiled with mode="default", dynamic=True, TF32 matmuls."""
    model = session.duplex.model
    llm, tts = model.llm.model, model.tts.model
    precision = torch.get_float32_matmul_precision()
    model.llm.model = torch.compile(llm, mode="default", dynamic=True)
    model.tts.model = torch.compile(tts, mode="default", dynamic=True)
    torch.set_float32_matmul_precision("high")
    torch._logging.set_logs(recompiles=True)  # each recompile and its reason, in the log
    try:
        yield
    finally:
        model.llm.model, model.tts.model = llm, tts
        torch.set_float32_matmul_precision(precision)
        torch._logging.set_logs(recompiles=False)


class StaticFeed:
    """HF's recipe on the vendor's decoder: a ``StaticCache`` for the LLM and its one-token step
    under ``torch.compile(mode="reduce-overhead")``; prefill runs the same forward eagerly on the
    same cache. Installed as the decoder's ``feed`` and ``get_cache_length``."""

    def __init__(self, decoder: Any, capacity: int) -> None:
        from transformers import StaticCache

        self.decoder, self.llm, self.length = decoder, decoder.m, 0
        self.cache = StaticCache(
            config=self.llm.config, max_batch_size=1, max_cache_len=capacity,
            device=self.llm.device, dtype=self.llm.dtype,
        )  # fmt: skip
        self.step = torch.compile(self.forward, mode="reduce-overhead", fullgraph=True)

    def forward(self, embeds: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        out = self.llm.model(
            inputs_embeds=embeds, position_ids=positions[None], cache_position=positions,
            past_key_values=self.cache, use_cache=True, return_dict=True,
        )  # fmt: skip
        hidden = out.last_hidden_state
        return self.llm.lm_head(hidden[:, -1:])[:, -1], hidden

    def feed(self, embeds: Tensor, return_logits: bool = False) -> Any:
        n = embeds.size(0)
        if self.length == 0:
            self.cache.reset()
        positions = torch.arange(self.length, self.length + n, device=embeds.device)
        if self.length + n > self.cache.max_cache_len:
            raise RuntimeError(f"StaticCache peer: {self.length + n} > {self.cache.max_cache_len}")
        run = self.step if n == 1 else self.forward
        if n == 1:  # a new step: the graph trees may reuse the last step's outputs (copied below)
            torch.compiler.cudagraph_mark_step_begin()
        # without grad (as HF's generate runs): with autograd on, inductor's CUDA graph trees
        # refuse their fast path ("pending, uninvoked backwards") and nothing is replayed
        with torch.no_grad():
            logits, hidden = run(embeds[None], positions)
        self.length += n
        self.decoder.cache = None
        if return_logits:
            return logits.clone(), hidden.clone()
        return None

    def get_cache_length(self) -> int:
        return self.length


@contextmanager
def static_cache(session: Session, capacity: int) -> Iterator[None]:
    """:class:`StaticFeed` in the decoder for the block; what was there before, after."""
    decoder = session.duplex.decoder
    static = StaticFeed(decoder, capacity)
    reset = decoder.reset
    names = ("feed", "get_cache_length", "reset")
    before = {name: decoder.__dict__[name] for name in names if name in decoder.__dict__}

    def reset_all() -> None:
        reset()
        static.length = 0

    decoder.feed, decoder.get_cache_length, decoder.reset = (
        static.feed, static.get_cache_length, reset_all,
    )  # fmt: skip
    try:
        yield
    finally:
        for name in names:
            decoder.__dict__.pop(name, None)
        decoder.__dict__.update(before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, required=True, help="the model's public code")
    parser.add_argument("--out", type=Path, required=True, help="result JSON")
    parser.add_argument("--work", type=Path, help="where the checkpoint is written")
    parser.add_argument("--size", default="released", choices=tuple(SIZES))
    parser.add_argument("--decoder", default=None, choices=("full", "small"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--arms", default="eager,SRc,R,Rc,SR,S")
    parser.add_argument("--units", type=int, default=20, help="counted speaking units per arm")
    parser.add_argument("--listen", type=int, default=5, help="counted listening units per arm")
    parser.add_argument("--settle", type=int, default=2, help="uncounted units after a switch")
    parser.add_argument(
        "--peers", default="vendor_eager,vendor_compile",
        help="of vendor_eager, vendor_compile, hf_static_compile (alone: --arms eager "
        "--peer-arm eager)",
    )  # fmt: skip
    parser.add_argument("--peer-arm", default="SRc", help="Token2Wav's arm under the peers")
    parser.add_argument("--peer-units", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--greedy", action="store_true", help="greedy LLM text (else sampled)")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"of {','.join(PHASES)}")
    parser.add_argument("--exact-arms", default="SRc", help="arms the exact phase compares")
    parser.add_argument("--exact-seeds", default="0,1")
    parser.add_argument("--exact-units", type=int, default=40)
    parser.add_argument("--again-units", type=int, default=26, help="eager's second run")
    parser.add_argument("--barge-at", type=int, default=9)
    parser.add_argument("--new-at", type=int, default=23)
    parser.add_argument("--window", default="300,240", help="the vendor's basic window marks")
    parser.add_argument("--vendor-units", type=int, default=6, help="vendor agreement units")
    parser.add_argument(
        "--kernels", default="",
        help="the backbone's kernels: vendor, fused or both (vendor,fused): the extent phase "
        "times each; the family loads with the last one (default: backbone.yaml's for the device)",
    )  # fmt: skip
    parser.add_argument(
        "--sdpa", default="",
        help="SDPA backends the extent phase also times beside backbone.yaml's and math "
        "(e.g. cudnn), or the declared one with a decode attention (sdpa, flex)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    phases = [p for p in args.phases.split(",") if p]
    if unknown := set(phases) - set(PHASES):
        parser.error(f"unknown phase {sorted(unknown)}: choose among {','.join(PHASES)}")
    args.arms = [Arm.parse(a) for a in args.arms.split(",")]
    if "peers" in phases and "hf_static_compile" in args.peers.split(","):
        ours = {*args.arms, Arm.parse(args.peer_arm)}
        if "exact" in phases:
            ours |= {Arm.parse(a) for a in args.exact_arms.split(",")}
        if ours != {Arm.EAGER}:
            parser.error(
                "--peers hf_static_compile runs alone: inductor's CUDA graph trees clear every "
                "cuBLAS workspace our captured graphs still use (a segmentation fault in "
                "Token2Wav's replay on the H200); run it as --phases peers --arms eager "
                "--peer-arm eager --peers hf_static_compile"
            )
    decoder = args.decoder or ("full" if args.device.startswith("cuda") else "small")
    shm = Path("/dev/shm")
    work = args.work or Path(
        tempfile.mkdtemp(prefix="minicpmo45-", dir=shm if shm.is_dir() else None)
    )
    kernels = [k for k in args.kernels.split(",") if k]
    if unknown_kernels := set(kernels) - {"vendor", "fused"}:
        parser.error(f"unknown kernels {sorted(unknown_kernels)}: choose vendor, fused")
    if "fused" in kernels and kernels[-1] != "fused":
        parser.error("--kernels: list fused last (the load joins the weights the graphs read)")
    if kernels:  # the family's load reads it (backbone.yaml's override)
        os.environ[KERNELS_ENV] = kernels[-1]
    stand_ins = stand_in_imports()
    folder = work / f"MiniCPM-o-4_5-random-{args.size}"
    build_s = write_checkpoint(args.code, folder, args.size, args.device, args.seed)
    print(f"checkpoint written in {build_s:.0f} s: {folder}", file=sys.stderr)
    if decoder == "full":
        write_token2wav(folder / TOKEN2WAV_FOLDER, args.seed)
    request = ModelRequest(
        device=args.device, model_size=decoder, checkpoint=folder, arm=args.arms[0],
        seed=args.seed, trust_checkpoint_code=True,
    )  # fmt: skip
    t0 = time.perf_counter()
    loaded = family("minicpmo45").load(request, lambda stage, fraction: None)
    load_s = time.perf_counter() - t0
    print(f"loaded and warmed up in {load_s:.0f} s", file=sys.stderr)
    session = Session(loaded, args)
    result: dict[str, Any] = {
        **environment(" ".join(["python3", "bench/minicpmo45.py", *(argv or sys.argv[1:])])),
        "size": args.size,
        "decoder": decoder,
        "weights": "random (the real model code, no checkpoint)",
        "import_stand_ins": stand_ins,
        "family_rules": session.rules is not None,
        "build_s": round(build_s, 1),
        "load_s": round(load_s, 1),
        "facts": loaded.facts,
        "warmup": loaded.warmup,
        "split_note": "stages synchronized at their edges; token2wav = our synthesis span",
        "llm_decoding": "greedy" if args.greedy else "sampled (the vendor's defaults)",
        "kernels": session.rules.kernels if session.rules is not None else None,
        "decode_attention": session.rules.decode if session.rules is not None else None,
        "extent_step": session.rules.extent_step if session.rules is not None else None,
        "arms": {},
        "peers": {},
    }
    if args.work is None:
        shutil.rmtree(folder, ignore_errors=True)  # loaded: free /dev/shm for the run
    log = functools.partial(print, file=sys.stderr, flush=True)
    if session.rules is not None:  # what the load compiled (the fused pieces), process-wide
        result["backbone_compile"] = session.rules.stats()["compile"]
    if "extent" in phases and session.rules is not None:
        steps = 50 if session.cuda else 3
        result["extent"] = extent_cost(
            session.rules, args.device, steps, kernels or [session.rules.kernels],
            tuple(b for b in args.sdpa.split(",") if b),
        )  # fmt: skip
        log("extent", json.dumps({k: v.get("ms_per_step", v.get("kernels"))
                                  for k, v in result["extent"].items()}))  # fmt: skip
        write(args.out, result)
    reference: list[dict[str, Any]] | None = None
    for arm in args.arms if "arms" in phases else []:
        run = session.conversation(arm, str(arm))
        units = run["units"][args.settle :]
        reference = reference or units
        run["figures"]["exact_vs_eager"] = agreement(units, reference)
        result["arms"][str(arm)] = run["figures"]
        result["replay"] = loaded.replay.snapshot()["total"] if loaded.replay is not None else {}
        write(args.out, result)  # after each phase: a run cut short keeps what it measured
    if "exact" in phases and session.rules is not None:
        high, low = (int(x) for x in args.window.split(","))
        result["exact"] = exact(
            session, [Arm.parse(a) for a in args.exact_arms.split(",")],
            [int(x) for x in args.exact_seeds.split(",")], units=args.exact_units,
            again_units=args.again_units, barge_at=args.barge_at, new_at=args.new_at,
            window=(high, low), log=log,
            write=lambda part: write(args.out, result | {"exact": part}),
        )  # fmt: skip
        write(args.out, result)
    if "vendor" in phases and session.rules is not None:
        result["vendor"] = vendor_agreement(session, args.seed, args.vendor_units)
        log("vendor", json.dumps(result["vendor"]))
        write(args.out, result)
    if session.cuda and "floor" in phases:
        session.fresh(Arm.EAGER, args.seed)
        for k in range(args.settle):
            session.unit(session.talk[k], False)
        result["floor"] = {
            "speaking_unit": floor(session, False),
            "listening_unit": floor(session, True),
        }
        print("floor", json.dumps(result["floor"]), file=sys.stderr)
        write(args.out, result)
    peers = [p for p in args.peers.split(",") if p] if "peers" in phases else []
    args.units, args.listen = args.peer_units, 0
    for name in peers:
        t0 = time.perf_counter()
        try:
            with vendor_mode(session), peer(name, session):
                run = session.conversation(Arm.parse(args.peer_arm), name)
        except Exception as error:  # a peer that fails is reported; the next one still runs
            traceback.print_exc()
            first = (str(error).strip().splitlines() or [""])[0]
            result["peers"][name] = {"error": f"{type(error).__name__}: {first}"[:500]}
            write(args.out, result)
            continue
        units = run["units"][args.settle :]
        if reference is not None:
            run["figures"]["agreement_vs_eager"] = agreement(units, reference[: len(units)])
        run["figures"]["wall_s"] = round(time.perf_counter() - t0, 1)
        result["peers"][name] = run["figures"]
        write(args.out, result)
    return 0


@contextmanager
def peer(name: str, session: Session) -> Iterator[None]:
    if name == "vendor_eager":
        yield
    elif name == "vendor_compile":
        with vendor_compile(session):
            yield
    elif name == "hf_static_compile":
        capacity = 4096 if session.args.size == "released" else 1024
        with static_cache(session, capacity):
            yield
    else:
        raise SystemExit(
            f"unknown peer {name!r}: choose vendor_eager, vendor_compile or hf_static_compile"
        )


def write(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())

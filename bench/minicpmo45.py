"""MiniCPM-o 4.5's 1-s unit on its real model code with random weights: LLM side vs Token2Wav.

    python3 bench/minicpmo45.py --code DIR --out bench/results/minicpmo45_h200.json     # GPU
    python3 bench/minicpmo45.py --code DIR --out /tmp/m.json --device cpu --size tiny --units 6

``--code`` is a folder with the model's public code (OpenBMB/MiniCPM-o-Demo ``MiniCPMO45/``: the
``*.py`` files, ``vocab.json``, ``merges.txt`` and the tokenizer/processor JSON files). It is
never committed: put it in an ignored folder and hand it to the GPU machine with the device
tool's ``carry``, with transformers 4.51.0 and its dependencies as wheels in ``.whl/``
(``bench/README.md``). No hub: the checkpoint folder is written here.

The script writes a checkpoint folder under ``--work``: the code, a ``config.json`` at ``--size``
(``tiny``: a 2-layer LLM of width 64, a 1-layer audio encoder and TTS; ``released``: the
published shapes — Qwen3-8B, Whisper-medium encoder, a 20-layer TTS — as far as the public code
states them) and random bf16 weights as safetensors, made by the model class of the folder's own
code (and, for a ``full`` decoder, ``assets/token2wav`` with our Token2Wav's seeded random weights
at the released sizes). Then it loads that folder through the family face as the app does
(consent given, our Token2Wav at ``--decoder`` size, warm-up), and runs ``--units`` units of the
demo talk through the loop under each arm in turn (``eager`` first, with the stock envelope,
then a live switch; the first ``--settle`` units of each arm are not counted: a replay arm
captures there).

Per arm: per-unit p50/p95/max of the unit, of ``backbone`` (the checkpoint's code: audio
encoder, LLM decode, TTS head) and of ``synthesis`` (our Token2Wav: flow and vocoder), and the
peak GPU memory. Random weights speak every unit (the worst case for the LLM side: ~20 decode
steps and the TTS head's 26); the text is noise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.face import ModelRequest
from adapters.minicpmo45.folder import TOKEN2WAV_FOLDER
from adapters.registry import family
from app.demo import talk_periods
from bench.env_info import environment
from engine.arms import Arm
from engine.duplex import DuplexLoop, PeriodOutcome
from engine.metrics import Metrics

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


def quantiles(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64) * 1e3
    if a.size == 0:
        return {}
    return {
        "p50_ms": round(float(np.quantile(a, 0.5)), 2),
        "p95_ms": round(float(np.quantile(a, 0.95)), 2),
        "max_ms": round(float(a.max()), 2),
    }


def stage_seconds(outcome: PeriodOutcome, name: str) -> float:
    spans = outcome.record.spans
    return float(sum(s["dur_us"] for s in spans if s["name"] == name and s["depth"] == 0)) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, required=True, help="the model's public code")
    parser.add_argument("--out", type=Path, required=True, help="result JSON")
    parser.add_argument("--work", type=Path, help="where the checkpoint is written (temp dir)")
    parser.add_argument("--size", default="released", choices=tuple(SIZES))
    parser.add_argument("--decoder", default=None, choices=("full", "small"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--arms", default="eager,SRc")
    parser.add_argument("--units", type=int, default=40, help="counted units per arm")
    parser.add_argument("--settle", type=int, default=3, help="uncounted units after a switch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    arms = [Arm.parse(a) for a in args.arms.split(",")]
    decoder = args.decoder or ("full" if args.device.startswith("cuda") else "small")
    work = args.work or Path(tempfile.mkdtemp(prefix="minicpmo45-"))
    stand_ins = stand_in_imports()
    folder = work / f"MiniCPM-o-4_5-random-{args.size}"
    build_s = write_checkpoint(args.code, folder, args.size, args.device, args.seed)
    print(f"checkpoint written in {build_s:.0f} s: {folder}", file=sys.stderr)
    if decoder == "full":
        write_token2wav(folder / TOKEN2WAV_FOLDER, args.seed)
    request = ModelRequest(
        device=args.device, model_size=decoder, checkpoint=folder, arm=arms[0],
        seed=args.seed, trust_checkpoint_code=True,
    )  # fmt: skip
    cuda = args.device.startswith("cuda")
    t0 = time.perf_counter()
    loaded = family("minicpmo45").load(request, lambda stage, fraction: None)
    load_s = time.perf_counter() - t0
    print(f"loaded and warmed up in {load_s:.0f} s", file=sys.stderr)
    metrics = Metrics(loaded.model.period_s, device=args.device, arm=str(arms[0]))
    loop = DuplexLoop(loaded.model, metrics, loaded.replay, None)
    talk = talk_periods(len(arms) * (args.units + args.settle), args.seed)
    result: dict[str, Any] = {
        **environment(" ".join(["python3", "bench/minicpmo45.py", *(argv or sys.argv[1:])])),
        "size": args.size,
        "decoder": decoder,
        "weights": "random (the real model code, no checkpoint)",
        "import_stand_ins": stand_ins,
        "build_s": round(build_s, 1),
        "load_s": round(load_s, 1),
        "facts": loaded.facts,
        "warmup": loaded.warmup,
        "arms": {},
    }
    k = 0
    for arm in arms:
        loop.request_arm(arm)
        outcomes: list[PeriodOutcome] = []
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        for i in range(args.settle + args.units):
            outcome = loop.step(talk[k])
            k += 1
            if i >= args.settle:
                outcomes.append(outcome)
        figures = {
            "unit": quantiles([o.record.processing_s for o in outcomes]),
            "backbone": quantiles([stage_seconds(o, "backbone") for o in outcomes]),
            "synthesis": quantiles([stage_seconds(o, "synthesis") for o in outcomes]),
            "speaking_units": sum(o.phase == "speak" for o in outcomes),
            "calls": sum(len(o.calls) for o in outcomes),
        }
        if cuda:
            figures["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        result["arms"][str(arm)] = figures
        print(arm, json.dumps(figures), file=sys.stderr)
        result["replay"] = loaded.replay.snapshot()["total"] if loaded.replay is not None else {}
        write(args.out, result)  # after each arm: a run cut short keeps what it measured
    return 0


def write(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())

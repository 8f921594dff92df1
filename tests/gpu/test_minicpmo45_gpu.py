"""MiniCPM-o 4.5 on CUDA at the released shapes (the real public model code, seeded random bf16
weights, the demo talk in, sampling on): eager is reproducible run to run, and every arm equals
eager bit for bit on every unit's text tokens, speech tokens and PCM, over ``UNITS`` (40) units
for two seeds, across a barge-in, the LLM cache's sliding-window events and a new conversation.

The window events: the family reads smaller window bounds from ``DUPLEXCADENCE_MO45_WINDOW``
(``high,low`` tokens; here 600,500 unless set), so the cache slides within the 40 units; where the
family has backbone rules, the test asserts that it slid. The two seeds share one set of weights
(seed 0; one 17-GB load) and differ in the talk and the sampling.

Needs the model code (``bench/kit.sh`` puts it in ``.vendor/minicpmo45``, or
``DUPLEXCADENCE_MO45_CODE``) and transformers 4.51.0 (``.whl/``); skips cleanly without either,
or without CUDA. ``DUPLEXCADENCE_MO45_UNITS`` and ``DUPLEXCADENCE_MO45_ARMS`` (comma-separated)
narrow a run. About 6 minutes on an H200 with every arm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.arms import Arm
from tests.gpu_results import record

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
CODE = Path(os.environ.get("DUPLEXCADENCE_MO45_CODE", ROOT / ".vendor" / "minicpmo45"))
UNITS = int(os.environ.get("DUPLEXCADENCE_MO45_UNITS", "40"))
ARMS = os.environ.get("DUPLEXCADENCE_MO45_ARMS", "S,R,Rc,SR,SRc")
WINDOW = "600,500"  # high, low watermarks in tokens: ~30 tokens a unit slide from about unit 20
BARGE_IN_AT = UNITS * 3 // 8
NEW_CONVERSATION_AT = UNITS * 5 // 8


@pytest.fixture(scope="module")
def session() -> Iterator[Any]:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not (CODE / "modeling_minicpmo.py").is_file():
        pytest.skip(f"no MiniCPM-o 4.5 model code in {CODE}: bench/kit.sh makes it")
    try:
        import transformers
    except ImportError:
        pytest.skip("needs transformers 4.51.0 (.whl/, bench/kit.sh)")
    if transformers.__version__ != "4.51.0":
        pytest.skip(f"needs transformers 4.51.0, not {transformers.__version__}")
    from adapters.face import ModelRequest
    from adapters.minicpmo45.folder import TOKEN2WAV_FOLDER
    from adapters.registry import family
    from bench.minicpmo45 import Session, stand_in_imports, write_checkpoint, write_token2wav

    os.environ.setdefault("DUPLEXCADENCE_MO45_WINDOW", WINDOW)
    stand_in_imports()
    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(prefix="mo45-test-", dir=shm if shm.is_dir() else None))
    folder = work / "MiniCPM-o-4_5-random-released"
    try:
        write_checkpoint(CODE, folder, "released", "cuda", seed=0)
        write_token2wav(folder / TOKEN2WAV_FOLDER, seed=0)
        request = ModelRequest(
            device="cuda", model_size="full", checkpoint=folder, arm=Arm.EAGER, seed=0,
            trust_checkpoint_code=True,
        )  # fmt: skip
        loaded = family("minicpmo45").load(request, lambda stage, fraction: None)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # loaded (or failed): free the memory disk
    args = argparse.Namespace(device="cuda", arms=[Arm.EAGER], settle=0, units=0, listen=0, seed=0)
    yield Session(loaded, args)
    del loaded
    torch.cuda.empty_cache()


def script(session: Any, arm: Arm, seed: int) -> list[dict[str, Any]]:
    """``UNITS`` units of the seed's talk under ``arm`` from a new conversation, re-seeded: a
    barge-in at ``BARGE_IN_AT``, a new conversation at ``NEW_CONVERSATION_AT``."""
    from app.demo import talk_periods

    session.fresh(arm, seed)
    units = []
    for k, mic in enumerate(talk_periods(UNITS, seed)):
        if k == BARGE_IN_AT:
            session.backbone.interrupt()
        if k == NEW_CONVERSATION_AT:
            session.loop.reset()
        units.append(session.unit(mic, False))
    return units


def slides(session: Any) -> int | None:
    """Window events the family's rules counted (None: the family has no rules)."""
    rules = session.rules
    if rules is None or not callable(getattr(rules, "stats", None)):
        return None
    return int(rules.stats().get("window", {}).get("slides", 0))


def sampling(session: Any, arm: Arm) -> dict[str, Any]:
    """Under a replaying arm, the rules' token-loop counters and the misses of the operators
    whose every call is a catalog entry (the token loops, the TTS condition and steps, the
    audio encoder's unit)."""
    rules = session.rules
    if not arm.replay or rules is None or not callable(getattr(rules, "stats", None)):
        return {}
    stats = rules.stats()
    if "sampled" not in stats:
        return {}
    ops = ("llm.sample", "tts.token", "tts.tokens", "tts.step", "audio.step")
    misses = {op: stats["replay"][op]["misses"] for op in ops if op in stats["replay"]}
    return {"sampled": stats["sampled"], "replay_misses": misses}


@pytest.mark.parametrize("seed", [0, 1], ids=["seed0", "seed1"])
def test_every_arm_equals_eager_across_barge_in_window_and_new_conversation(
    session: Any, seed: int, replays: list[int]
) -> None:
    from bench.minicpmo45 import agreement

    reference = script(session, Arm.EAGER, seed)
    window = slides(session)
    figures: dict[str, Any] = {"eager_window_slides": window}
    if seed == 0:  # eager is reproducible run to run before it is anyone's reference
        figures["eager_again"] = agreement(script(session, Arm.EAGER, seed), reference)
    for name in ARMS.split(","):
        launched = replays[0]
        figures[name] = agreement(script(session, Arm.parse(name), seed), reference)
        figures[name]["graph_replays"] = replays[0] - launched
        figures[name] |= sampling(session, Arm.parse(name))
    spoke = sum(bool(u["speech"]) for u in reference)
    record("minicpmo45_arms_equal_eager", seed=seed, units=UNITS, spoke=spoke,
           barge_in_at=BARGE_IN_AT, new_conversation_at=NEW_CONVERSATION_AT, **figures)  # fmt: skip
    for name, result in figures.items():
        if isinstance(result, dict):
            assert result["equal"]["all"] == UNITS, (name, result)
    assert spoke > 0
    for name, result in figures.items():  # the token loops ran on the device, all replayed
        if isinstance(result, dict) and "sampled" in result:
            assert result["sampled"]["tokens"] == result["sampled"]["host_reads"] > 0, name
            for op, misses in result["replay_misses"].items():
                assert set(misses) <= {"warmup"}, (name, op, misses)
    if window is not None:
        assert window > 0, "no sliding-window event within the units: smaller bounds needed"

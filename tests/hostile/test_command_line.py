"""The command line on hostile arguments: one line naming the fix, never a traceback, and no
file touched (issue 12, "One line, never a traceback")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.hostile.child import cli, one_line_error, run, snapshot

SMALL = 1 << 30  # commands that fail before torch loads need little address space


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["demo", "--arm", "bogus", "--out", "."], ["--arm 'bogus'", "SRc"]),
        (["synth", "--device", "tpu", "--voice-frames", "40", "--wav", "x.wav"], ["'tpu'"]),
        (["plan", "minicpmo45_token2wav", "--set", "f_call=nan"], ["NAME=INTEGER"]),
        (["plan", "minicpmo45_token2wav", "--set", "f_call=0"], ["frames: got 0", "--set"]),
        (["export", "missing.jsonl"], ["missing.jsonl"]),
    ],
    ids=["demo-arm", "synth-device", "plan-nan", "plan-zero", "export-missing"],
)
def test_bad_arguments_are_one_line(tmp_path: Path, argv: list[str], needles: list[str]) -> None:
    before = snapshot(tmp_path)
    one_line_error(cli(*argv, cwd=tmp_path, memory=SMALL), *needles)
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_demo_without_cuda_is_one_line(tmp_path: Path) -> None:
    result = cli("demo", "--family", "synthetic", "--device", "cuda", "--out", str(tmp_path))
    one_line_error(result, "cuda")


def test_an_unexpected_error_is_one_line_with_the_way_to_the_traceback(tmp_path: Path) -> None:
    code = """
        import app.cli
        def broken(args):
            raise ZeroDivisionError("a bug")
        app.cli._run_export = broken
        sys.exit(app.cli.main(["export", "t.jsonl"]))
    """
    line = one_line_error(run(code, cwd=tmp_path, memory=SMALL), "internal error", "a bug")
    assert "DUPLEXCADENCE_DEBUG=1" in line

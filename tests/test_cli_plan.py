"""``duplexcadence plan``: the table and JSON show the paper's figures; errors exit cleanly.
CPU only; one subprocess run checks ``python -m app.cli`` end to end (about a second)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_plan_table_shows_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "minicpmo45_token2wav"]) == 0
    out = capsys.readouterr().out
    assert "302, 352, 402" in out
    assert "16×16×2×8×1000×128" in out and "10×16×2×8×458×128" in out
    assert "OUTSIDE (K 2,001 > 64)" in out
    for arm in ("eager", "S", "R", "Rc", "SR", "SRc"):
        assert any(line.split()[:1] == [arm] for line in out.splitlines()), arm


def test_plan_json_and_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "minicpmo45_token2wav", "--json", "--set", "f_call=50"]) == 0
    data = json.loads(capsys.readouterr().out)
    regions = {r["name"]: r for r in data["regions"]}
    assert regions["estimator_att"]["demand_shape"] == [10, 16, 2, 8, 452, 128]
    assert regions["estimator_att"]["width"] == 3
    operators = {o["name"]: o for o in data["operators"]}
    assert operators["backbone"]["width"] == 2001 and not operators["backbone"]["in_scope"]
    assert {p["arm"] for p in data["prices"]} == {"eager", "S", "R", "Rc", "SR", "SRc"}


@pytest.mark.parametrize("name", ["moshi", "personaplex", "freezeomni", "lycheefd_token2wav"])
def test_every_family_plans(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", name]) == 0
    assert f"plan: {name}" in capsys.readouterr().out


def test_missing_declaration_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "no_such_family"]) == 2
    err = capsys.readouterr().err
    assert "no declaration at" in err and "minicpmo45_token2wav" in err


@pytest.mark.parametrize("item", ["f_call", "f_call=fifty", "no_such_name=3"])
def test_bad_override_exits_2(item: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "minicpmo45_token2wav", "--set", item]) == 2
    assert "--set" in capsys.readouterr().err


def test_invalid_declaration_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    source = (REPO / "assets/declarations/freezeomni.yaml").read_text(encoding="utf-8")
    path.write_text(source.replace("policy: sliding_window", "policy: sliding"), encoding="utf-8")
    assert main(["plan", str(path)]) == 1
    err = capsys.readouterr().err
    assert "regions.left_context.retention.policy: got 'sliding'" in err


def test_module_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "plan", "minicpmo45_token2wav", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    regions = {r["name"]: r for r in json.loads(done.stdout)["regions"]}
    assert regions["estimator_att"]["extents"] == [302, 352, 402]
    missing = subprocess.run(
        [sys.executable, "-m", "app.cli", "plan", "nope"],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    assert missing.returncode == 2

"""Bounds before work: hostile YAML, sizes and expressions are refused in one line, in bounded
time and memory, before anything is allocated (issue 12, "Bounds before work")."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.token2wav.config import CheckpointError, flow_config_from_yaml, read_flow_config
from app.settings import Settings, SettingsError, check_settings, load_settings
from engine.contract import DeclarationError
from engine.declaration_io import load_declaration, parse_declaration, resolve_path
from engine.expr import ExprError, parse_expr
from engine.plan import make_plan
from engine.safe_yaml import YamlError, parse_yaml
from tests.hostile.child import cli, one_line_error
from tests.test_token2wav_config import FLOW_YAML

SHIPPED = resolve_path("minicpmo45_token2wav")


def laughs(levels: int = 9, width: int = 10) -> str:
    """The "billion laughs": each anchor a list of ``width`` aliases of the one before."""
    lines = ["lol0: &lol0 [lol]"]
    for i in range(1, levels + 1):
        lines.append(f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def declaration(**edits: object) -> dict[str, object]:
    document = yaml.safe_load(SHIPPED.read_text())
    for path, value in edits.items():
        node = document
        *parents, key = path.split("__")
        for part in parents:
            node = node[part]
        node[key] = value
    return document


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (laughs(), "over the bound 100000"),
        ("a: " + "[" * 5000 + "]" * 5000, "nesting depth 65 exceeds the bound 64"),
        ("a: &a [*a, *a]", "refers to its own value"),
        ("a: [unclosed", "not valid YAML"),
    ],
    ids=["laughs", "deep", "cycle", "broken"],
)
def test_hostile_yaml_is_refused_quickly_everywhere(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(YamlError, match=re.escape(needle)):
        parse_yaml(text, "doc.yaml")
    (tmp_path / "flow.yaml").write_text("flow: 1\n" + text)
    with pytest.raises(CheckpointError, match=re.escape(needle)) as info:
        read_flow_config(tmp_path / "flow.yaml")
    assert str(tmp_path / "flow.yaml") in str(info.value)
    (tmp_path / "settings.yaml").write_text(text)
    with pytest.raises(SettingsError, match=re.escape(needle)):
        load_settings(tmp_path / "settings.yaml")
    (tmp_path / "decl.yaml").write_text(text)
    with pytest.raises(DeclarationError, match=re.escape(needle)):
        load_declaration(tmp_path / "decl.yaml")


def test_oversized_yaml_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "settings.yaml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(SettingsError, match="larger than the bound"):
        load_settings(big)


def test_flow_yaml_refs_cannot_multiply_past_the_bound() -> None:
    lines = ["r0: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"r{i}: [" + ", ".join([f"!ref <r{i - 1}>"] * 10) + "]" for i in range(1, 8)]
    with pytest.raises(CheckpointError, match="expand to more than"):
        flow_config_from_yaml("\n".join(lines) + "\nflow: 1\n")


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            "depth: 16",
            "depth: 100000",
            "`flow.decoder.estimator.depth` = 100000 exceeds the bound 64",
        ),
        ("depth: 16", "depth: -16", "= -16 is not supported"),
        ("depth: 16", "depth: 0", "= 0 is not supported"),
        ("mlp_ratio: 4", "mlp_ratio: .nan", "positive, finite float"),
        ("mlp_ratio: 4", "mlp_ratio: .inf", "positive, finite float"),
        ("num_blocks: 6", "num_blocks: 1e9", "positive, finite int"),
    ],
)
def test_flow_yaml_sizes_are_positive_finite_and_bounded(old: str, new: str, needle: str) -> None:
    assert old in FLOW_YAML, "fixture drifted"
    with pytest.raises(CheckpointError, match=re.escape(needle)):
        flow_config_from_yaml(FLOW_YAML.replace(old, new))


@given(st.text(alphabet="()+-*/ 0123456789ab_", max_size=600))
@settings(max_examples=200, deadline=None)
def test_expressions_parse_or_say_why(source: str) -> None:
    try:
        expr = parse_expr(source)
    except ExprError:
        return
    with contextlib.suppress(ExprError):
        expr.evaluate({"a": 3, "b": 0, "_": 1})


def test_deep_parentheses_are_an_error_not_a_recursion() -> None:
    with pytest.raises(ExprError, match="over the bound"):
        parse_expr("(" * 400 + "1" + ")" * 400)
    with pytest.raises(ExprError, match="nests 40 deep, over the bound 32"):
        parse_expr("(" * 40 + "1" + ")" * 40)


@pytest.mark.parametrize(
    ("edits", "needle"),
    [
        ({"operating_point__f_retained": -100}, "operating_point.f_retained: got -100"),
        ({"operating_point__f_chunk": 0}, "calls.steady.frames: got 0"),
        ({"clocks__token": {"rate_hz": float("nan")}}, "clocks.token.rate_hz: got nan"),
        ({"clocks__token": {"rate_hz": float("inf")}}, "clocks.token.rate_hz: got inf"),
        ({"stream": [{"call": "steady", "repeat": 10**9}]}, "stream[0].repeat: got 1000000000"),
    ],
)
def test_sizes_that_are_not_sizes_are_refused(edits: dict[str, object], needle: str) -> None:
    with pytest.raises(DeclarationError, match=re.escape(needle)):
        make_plan(parse_declaration(declaration(**edits)))


def test_plan_counts_a_billion_calls_instead_of_enumerating_them() -> None:
    document = declaration(calls__flush={"tokens": [8, 10**9]})
    plan = make_plan(parse_declaration(document))
    counted = [op for op in plan.operators if op.flush_counted]
    assert counted and all(op.flush_classes >= 10**9 - 7 for op in counted)


def test_plan_command_stays_bounded_on_hostile_declarations(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text(yaml.safe_dump(declaration(calls__flush={"tokens": [8, 10**9]})))
    result = cli("plan", str(huge), timeout=60, memory=1 << 30)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(counted)" in result.stdout
    deep = tmp_path / "deep.yaml"
    deep.write_text(laughs())
    one_line_error(cli("plan", str(deep), memory=1 << 30), str(deep), "bound 100000")
    one_line_error(cli("plan", str(SHIPPED), "--set", "f_call=-5", memory=1 << 30), "f_call")


def test_a_voice_longer_than_the_declared_envelope_is_refused_before_loading() -> None:
    check_settings(
        Settings(family="synthetic", voice_frames=844, device="cpu")
    )  # the longest that fits
    with pytest.raises(SettingsError, match=r"voice_frames = 1000000000: region estimator_att"):
        check_settings(Settings(family="synthetic", voice_frames=10**9, device="cpu"))


def test_a_non_finite_trace_value_is_named() -> None:
    from engine.trace import TraceError, _json_line

    with pytest.raises(TraceError, match=r"period 3: `loop.level` is NaN or infinite"):
        _json_line({"index": 3, "loop": {"level": float("nan")}}, "period 3")

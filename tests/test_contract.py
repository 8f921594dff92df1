"""Declarations: the safe expression parser, the admission predicate, retention slices and
validation errors that name the YAML path, the bad value and the fix. CPU only, under a second."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.carry import RetentionRule, declared_retention
from engine.contract import (
    DeclarationError,
    DeclarationNotFound,
    Order,
    RetentionPolicy,
)
from engine.declaration_io import (
    declarations_dir,
    list_declarations,
    load_declaration,
    parse_declaration,
)
from engine.expr import ExprError, evaluate_predicate, parse_expr, parse_predicate

FAMILIES = ["freezeomni", "lycheefd_token2wav", "minicpmo45_token2wav", "moshi", "personaplex"]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def minicpmo_doc() -> dict[str, Any]:
    """The MiniCPM-o declaration as plain YAML data, to mutate into invalid variants."""
    text = (declarations_dir() / "minicpmo45_token2wav.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))


def _error(doc: dict[str, Any]) -> str:
    with pytest.raises(DeclarationError) as caught:
        parse_declaration(doc)
    return str(caught.value)


def test_all_five_families_ship_and_load() -> None:
    assert list_declarations() == FAMILIES
    for name in FAMILIES:
        decl = load_declaration(name)
        assert decl.name == name
        assert decl.host_randomness == "forbidden"


def test_load_by_path_equals_load_by_name() -> None:
    path = declarations_dir() / "moshi.yaml"
    assert load_declaration(path) == load_declaration("moshi")


def test_missing_declaration_names_the_shipped_ones() -> None:
    with pytest.raises(DeclarationNotFound, match="minicpmo45_token2wav") as caught:
        load_declaration("no_such_family")
    assert isinstance(caught.value, FileNotFoundError)


def test_minicpmo_declaration_matches_the_paper() -> None:
    decl = load_declaration("minicpmo45_token2wav")
    values = decl.values()
    assert values["f_prompt"] == 302 and values["f_retained"] == 100
    assert values["f_chunk"] == 50 and values["f_call"] == 56 and values["n_steps"] == 10
    estimator = decl.regions["estimator_att"]
    assert estimator.retention.order is Order.NEWEST_FIRST
    assert decl.regions["conformer_att"].retention.order is Order.OLDEST_FIRST
    stable = {name for name, region in decl.regions.items() if region.address_stable}
    assert {"estimator_att", "conformer_att", "estimator_cnn"} <= stable
    assert estimator.envelope is not None
    assert estimator.envelope.shape == (16, 16, 2, 8, 1000, 128)
    assert len(decl.constants) == 3
    assert decl.operators["hift"].device_randomness
    assert not decl.operators["estimator"].device_randomness


def test_overrides_recompute_derived_entries() -> None:
    decl = load_declaration("minicpmo45_token2wav")
    assert decl.values({"stride_tokens": 10})["f_call"] == 26
    assert decl.values({"f_call": 50})["f_call"] == 50
    with pytest.raises(DeclarationError, match=r"operating_point\.f_cal: .*expected one of"):
        decl.values({"f_cal": 50})


# --- expressions and predicates -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("f_prompt + f_retained + f_call", 458),
        ("2 * (tokens - 3)", 20),
        ("f_call // 2 - 1", 27),
        ("-3 + 2 * 4", 5),
        ("7 - 2 - 1", 4),
        (42, 42),
    ],
)
def test_expressions_follow_arithmetic_precedence(text: int | str, value: int) -> None:
    env = {"f_prompt": 302, "f_retained": 100, "f_call": 56, "tokens": 13}
    assert parse_expr(text).evaluate(env) == value


@pytest.mark.parametrize("text", ["__import__('os')", "2 ** 3", "a.b", "1 +", "(1", "1 / 2", ""])
def test_expressions_reject_anything_but_the_grammar(text: str) -> None:
    with pytest.raises(ExprError):
        parse_expr(text)


def test_unknown_name_at_evaluation_lists_the_known_ones() -> None:
    with pytest.raises(ExprError, match=r"unknown name 'f_cal'.*f_call"):
        parse_expr("f_cal + 1").evaluate({"f_call": 56})


def test_admission_rejects_calls_longer_than_a_chunk() -> None:
    decl = load_declaration("minicpmo45_token2wav")
    env = decl.values()
    assert evaluate_predicate(decl.admission, {**env, "f": 50})
    assert evaluate_predicate(decl.admission, {**env, "f": 10})
    assert not evaluate_predicate(decl.admission, {**env, "f": 51})


def test_structured_predicates() -> None:
    env = {"f": 20, "n": 40}
    both = parse_predicate({"all": [{"ge": ["f", 1]}, {"le": ["f", "n"]}]})
    either = parse_predicate({"any": [{"eq": ["f", 1]}, {"in": ["f", [10, "n // 2"]]}]})
    assert evaluate_predicate(both, env) and evaluate_predicate(either, env)
    assert not evaluate_predicate(parse_predicate({"not": {"lt": ["f", "n"]}}), env)
    with pytest.raises(ExprError, match="expected one of"):
        parse_predicate({"lte": ["f", 1]})


# --- retention runs (the carry and the auditor keep exactly these) --------------------------


def kept(rule: RetentionRule, extent: int) -> list[int]:
    live = list(range(extent))
    return [x for run in rule.spans(extent) for x in live[run.src : run.src + run.length]]


def test_prompt_plus_history_runs_follow_the_layout() -> None:
    decl = load_declaration("minicpmo45_token2wav")
    env = {**decl.values(), "f_prompt": 3, "f_retained": 2}
    live = list(range(9))
    conformer = declared_retention(decl.regions["conformer_att"], env)  # oldest_first, 3 + 2
    estimator = declared_retention(decl.regions["estimator_att"], env)  # newest_first, 2 + 3
    assert (conformer.dim, estimator.dim) == (3, 4)  # the regions' clock axes
    assert kept(conformer, 9) == live[:3] + live[-2:]  # H[:P] ‖ H[-R:]
    assert kept(estimator, 9) == live[:3] + live[-2:]  # H[:R] ‖ H[-P:] with R = f_prompt = 3
    assert kept(estimator, 5) == live[:5]  # not above P + R: untouched
    assert decl.regions["conformer_att"].retention.retained_extent(9, env) == 5


def test_ring_and_window_extents() -> None:
    moshi = load_declaration("moshi")
    ring = moshi.regions["lm_kv"].retention
    assert ring.policy is RetentionPolicy.RING
    assert ring.retained_extent(1, moshi.values()) == 3000
    with pytest.raises(ValueError, match="never trims"):
        declared_retention(moshi.regions["lm_kv"], moshi.values())
    omni = load_declaration("freezeomni")
    window = declared_retention(omni.regions["left_context"], omni.values())
    assert kept(window, 50) == list(range(40, 50))


# --- validation errors name the field, the value and the fix --------------------------------


def test_typo_key_is_rejected(minicpmo_doc: dict[str, Any]) -> None:
    doc = copy.deepcopy(minicpmo_doc)
    region = doc["regions"]["estimator_att"]
    region["adress_stable"] = region.pop("address_stable")
    message = _error(doc)
    assert "regions.estimator_att.address_stable" in message or "adress_stable" in message
    doc = copy.deepcopy(minicpmo_doc)
    doc["regions"]["estimator_att"]["retentoin"] = {}
    message = _error(doc)
    assert message.startswith("regions.estimator_att.retentoin: unknown key")
    assert "expected one of" in message and "retention" in message


def test_bad_order_names_the_choices(minicpmo_doc: dict[str, Any]) -> None:
    minicpmo_doc["regions"]["estimator_att"]["retention"]["order"] = "newest_last"
    message = _error(minicpmo_doc)
    assert message.startswith("regions.estimator_att.retention.order: got 'newest_last'")
    assert "expected one of newest_first, oldest_first" in message


def test_missing_clock_reference(minicpmo_doc: dict[str, Any]) -> None:
    minicpmo_doc["regions"]["conformer_att"]["dims"]["time"] = {"clock": "mel"}
    message = _error(minicpmo_doc)
    assert message.startswith("regions.conformer_att.dims.time.clock: got 'mel'")
    assert "expected one of token, frame" in message


def test_unknown_name_in_an_expression(minicpmo_doc: dict[str, Any]) -> None:
    minicpmo_doc["operators"]["estimator"]["calls"]["steady"]["frames"] = "f_cal"
    message = _error(minicpmo_doc)
    assert message.startswith("operators.estimator.calls.steady.frames: unknown name 'f_cal'")
    assert "declare it under operating_point" in message


def test_more_invalid_declarations(minicpmo_doc: dict[str, Any]) -> None:
    cases: list[tuple[str, Any, str]] = [
        ("operating_point", {"a": "b + 1", "b": "a"}, "operating_point.a"),
        ("admission", {"le": ["f", "f_chunk", 3]}, "admission: 'le' takes a list of two"),
        ("effects", {"host_randomness": "allowed"}, "effects.host_randomness: got 'allowed'"),
        ("stream", [{"call": "flush", "tokens": 40}], "stream[0].tokens: got 40"),
    ]
    for key, value, expected in cases:
        doc = copy.deepcopy(minicpmo_doc)
        doc[key] = value
        assert _error(doc).startswith(expected), key
    doc = copy.deepcopy(minicpmo_doc)
    doc["operators"]["hift"]["writes"] = ["estimator_att"]
    assert "already written by 'estimator'" in _error(doc)
    doc = copy.deepcopy(minicpmo_doc)
    doc["clocks"]["token"] = {"per": "sample", "ratio": 2}
    assert _error(doc).startswith("clocks.token.per: token -> sample -> frame -> token is a cycle")


def test_no_eval_or_exec_in_the_declaration_code() -> None:
    files = [
        "engine/expr.py",
        "engine/contract.py",
        "engine/declaration_io.py",
        "engine/yaml_fields.py",
        "engine/extents.py",
        "engine/plan.py",
    ]
    for name in files:
        source = (REPO / name).read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w.])(eval|exec|compile)\s*\(", source), name
        assert "yaml.load(" not in source and "unsafe_load" not in source, name

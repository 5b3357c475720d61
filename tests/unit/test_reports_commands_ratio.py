"""reports/commands/ratio.py: the ratio report of a small dump, in each role its reporter
serves (document, text, checks), stating the counts, the smallest q/eps, the decades and the
safe eps that numpy gives; the histogram rows; the budget, ties, zero vectors and shards."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.analysis import RatioReport, analyze_dump, evaluate_gate
from rmsnorm_eps.reports.commands.ratio import (
    RATIO_RULES,
    RatioReporter,
    histogram_rows,
    quantity_kind,
    quantity_label,
    safe_eps_document,
    zero_part,
)
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.schema import load_schema
from tests.unit.report_cases import HOSTILE_LAYER, RATIO_EPS, write_ratio_dump

DELTA = 0.01
#: A >= 1 - delta  <=>  r >= (1 - delta)^2 / (1 - (1 - delta)^2), r = q/eps
BOUND = (1 - DELTA) ** 2 / (1 - (1 - DELTA) ** 2)


@pytest.fixture(scope="module")
def raw_case(tmp_path_factory: pytest.TempPathFactory) -> tuple[RatioReport, np.ndarray]:
    """Raw activations (64 vectors of 16) whose q spans 1e-10 .. 1: some below the bound."""
    rng = np.random.default_rng(7)
    scale = 10.0 ** rng.uniform(-5, 0, size=(64, 1))
    x = (rng.standard_normal((64, 16)) * scale).astype(np.float32)
    path = tmp_path_factory.mktemp("raw") / "x.npy"
    np.save(path, x, allow_pickle=False)
    q = np.mean(x.astype(np.float64) ** 2, axis=-1)
    return analyze_dump(path, 1e-6, raw=True, top_k=3), q


def test_document_counts_are_numpys(raw_case: tuple[RatioReport, np.ndarray]) -> None:
    rep, q = raw_case
    eps = 1e-6
    r = q / eps
    below = int(np.sum(r < BOUND))
    assert 0 < below < q.size
    doc = RatioReporter().document(rep)
    jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)
    assert doc["command"] == "ratio" and doc["schema_version"] == 2
    assert doc["min_ratio"] == pytest.approx(BOUND, rel=1e-12)
    assert doc["summary"]["below_bound"] == below == doc["summary"]["violations"]
    assert doc["summary"]["violation_fraction"] == pytest.approx(below / q.size)
    (layer,) = doc["layers"]
    assert (layer["count"], layer["raw_dim"], layer["shape"]) == (64, 16, [64])
    assert layer["min_ratio"] == pytest.approx(r.min(), rel=1e-12)
    assert layer["max_q"] == pytest.approx(q.max(), rel=1e-12)
    # worst: the top_k smallest q/eps, ascending, with their indices
    order = np.argsort(r)[:3]
    assert [w["index"] for w in layer["worst"]] == [[int(i)] for i in order]
    assert [w["ratio"] for w in layer["worst"]] == pytest.approx(r[order].tolist(), rel=1e-12)
    # decades: 10**k <= r < 10**(k+1)
    k, counts = np.unique(np.floor(np.log10(r)).astype(int), return_counts=True)
    assert [(d["decade"], d["count"]) for d in layer["decades"]] == list(
        zip(k.tolist(), counts.tolist(), strict=True)
    )
    # the safe eps: the largest eps with min q / eps >= bound
    assert layer["safe_eps"] == pytest.approx(q.min() / BOUND, rel=1e-12)
    assert layer["safe_eps_margin_decades"] == pytest.approx(np.log10(q.min() / BOUND / eps))


def test_document_of_a_merge_names_its_shards(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    merged = replace(rep, shards=("s0.json", "s1.json"))
    doc = RatioReporter().document(merged)
    assert doc["command"] == "merge" and doc["shards"] == ["s0.json", "s1.json"]
    assert "shards" not in RatioReporter().document(rep)
    assert (
        RatioReporter(RenderOptions(gate=evaluate_gate(rep))).document(rep)["gate"]["reason"]
        == "4 violation(s), none allowed"
    )


def test_document_nonfinite_as_strings_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "q.npy"
    np.save(path, np.array([np.nan, np.inf, 1.0]), allow_pickle=False)
    doc = RatioReporter().document(analyze_dump(path, RATIO_EPS))
    layer = doc["layers"][0]
    assert (layer["nan"], layer["inf"], layer["nonfinite"]) == (1, 1, 2)
    assert [n["value"] for n in layer["nonfinite_examples"]] == ["nan", "inf"]
    json.dumps(doc, allow_nan=False)


def test_text_states_the_bound_rows_and_total(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS, top_k=2)
    out = RatioReporter(RenderOptions(gate=evaluate_gate(rep))).text(rep)
    lines = out.splitlines()
    assert lines[0].endswith("bound A >= 0.99 (delta 0.01) <=> q/eps >= 49.2512562814")
    row = next(line for line in lines if line.split()[:1] == ["bad"])
    # eps, count, nonfinite, zero, min q > 0, min q/eps (1e-9/1e-6), min A, below, violating
    assert row.split()[1:] == ["1e-06", "3", "0", "0", "1e-09", "0.001", "0.031607", "2", "66.7%"]
    assert "bad: worst 2 input(s)" in out
    assert "nan: 1 nonfinite q (1 NaN, 0 inf), each a violation: [0]=nan" in out
    assert (
        "Total: 4 violation(s) in 3 of 4 layer(s) (3 below the bound, 1 nonfinite) out of 9 inputs"
        in out
    )
    assert lines[-1] == "FAIL: 4 violation(s), none allowed"
    assert "Safe eps (model): 2.03041e-12;" in out  # 1e-10 / 49.25...


def test_text_escapes_a_hostile_layer_name(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    out = RatioReporter().text(rep)
    assert "\x1b" not in out and "\u202e" not in out
    assert "##[" not in out and "##vso[" not in out  # (histogram bars are the report's #s)
    assert "\\x1b[31m\\x0a:error:pwn \\x23#[group]" in out
    assert HOSTILE_LAYER not in out
    assert not any(line.lstrip().startswith("::") for line in out.splitlines())


def test_text_histogram_modes(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    title = ": inputs per decade of r = q/eps"
    counts = {
        mode: RatioReporter(RenderOptions(histogram=mode)).text(rep).count(title)
        for mode in ("auto", "all", "violating", "none")
    }
    assert counts == {"auto": 4, "all": 4, "violating": 3, "none": 0}  # 4 layers <= 8: all


def test_histogram_rows_by_hand() -> None:
    layer = SimpleNamespace(
        decades=((-1, 2), (2, 5)),
        zero_count=1,
        zeros_violate=False,
        nonfinite=3,
        quantity="q",
    )
    assert histogram_rows(layer, 49.25) == [  # type: ignore[arg-type]
        ("q = 0", 1, "zero vectors"),
        ("1e-1 <= r < 1e0", 2, "below bound"),
        ("1e0 <= r < 1e1", 0, "below bound"),
        ("1e1 <= r < 1e2", 0, "<- bound"),
        ("1e2 <= r < 1e3", 5, ""),
        ("NaN/inf", 3, "violation"),
    ]
    # a bound on a decade's lower edge: that decade passes whole
    edge = SimpleNamespace(decades=((1, 1), (2, 1)), zero_count=0, nonfinite=0, quantity="v")
    assert [m for _, _, m in histogram_rows(edge, 100.0)] == ["below bound", ""]  # type: ignore[arg-type]


def _checks(rep: RatioReport, **gate: Any) -> Any:
    return RatioReporter(RenderOptions(gate=evaluate_gate(rep, **gate))).checks(rep)


def test_checks_two_per_layer_with_unrounded_numbers(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    report = RatioReporter(RenderOptions(gate=evaluate_gate(rep))).checks(rep)
    assert report.rules == RATIO_RULES
    assert [(c.rule.split("/")[1], c.name, c.passed) for c in report.checks[:4]] == [
        ("below-bound", "ok", True),
        ("nonfinite", "ok", True),
        ("below-bound", "bad", False),
        ("nonfinite", "bad", True),
    ]
    bad = report.checks[2]
    assert bad.level == "error"
    assert bad.numbers["below_bound"] == 2 and bad.numbers["fraction"] == 2 / 3
    assert bad.numbers["min_ratio"] == 1e-9 / RATIO_EPS
    assert bad.numbers["bound_min_ratio"] == pytest.approx(BOUND, rel=1e-12)
    assert bad.message.startswith("bad: 2 of 3 inputs (66.7%) have q/eps below 49.2512562814")
    nan = report.checks[5]
    assert (nan.name, nan.passed, nan.numbers["nan"]) == ("nan", False, 1)
    assert nan.message == "nan: 1 nonfinite q of 2 inputs (1 NaN, 0 inf), first at index [0]"
    assert report.checks[6].name == HOSTILE_LAYER  # exact: each format escapes it
    assert report.source == rep.source and not report.passed


def test_checks_budget_makes_warnings_and_verdict(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    within = _checks(rep, max_violations=4)
    assert within.passed and {c.level for c in within.failed} == {"warning"}
    over = _checks(rep, max_violations=3)
    assert not over.passed and {c.level for c in over.failed} == {"error"}
    assert dict(over.facts)["verdict"].startswith("FAIL: ")
    no_gate = RatioReporter().checks(rep)
    assert no_gate.verdict == "4 violation(s)" and not no_gate.passed


def test_checks_a_tie_passes(write_npy: Callable[..., Path]) -> None:
    """q/eps equal to the bound passes; the next float below fails."""
    eps = 1e-6
    q = np.array([2.0, 1.0])
    tie = float(q[1] / eps)
    passed = RatioReporter().checks(analyze_dump(write_npy(q), eps, min_ratio=tie))
    failed = RatioReporter().checks(
        analyze_dump(write_npy(q), eps, min_ratio=np.nextafter(tie, np.inf))
    )
    assert passed.passed and passed.checks[0].passed
    assert not failed.passed and failed.checks[0].numbers["below_bound"] == 1


def test_zero_vectors_count_apart_unless_violations(write_npy: Callable[..., Path]) -> None:
    path = write_npy(np.array([0.0, 0.0, 1.0]))
    rep = analyze_dump(path, RATIO_EPS)
    assert zero_part(rep) == "; 2 zero vector(s), output 0 under any eps, not counted"
    assert RatioReporter().checks(rep).passed
    strict = analyze_dump(path, RATIO_EPS, zero_is_violation=True)
    assert zero_part(strict) == ", 2 zero vector(s), each a violation"
    failed = RatioReporter().checks(strict)
    assert not failed.passed and "2 zero vector(s) (q = 0), each a violation" in (
        failed.checks[0].message
    )
    assert RatioReporter().document(strict)["zero_is_violation"] is True
    assert zero_part(analyze_dump(write_npy(np.array([1.0])), RATIO_EPS)) == ""


def test_merge_checks_point_at_the_shard_of_the_worst_input(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    worst = replace(rep.layers[1].worst[0], shard=1, shard_index=(0,))
    layer = replace(rep.layers[1], worst=(worst, *rep.layers[1].worst[1:]))
    merged = replace(rep, layers=(rep.layers[0], layer), shards=("a.json", "b.json"))
    report = RatioReporter().checks(merged)
    assert report.command == "merge" and report.source is None
    bad = report.checks[2]
    assert bad.source == "b.json" and "(shard 1 b.json at [0])" in bad.message
    assert ("shards", "a.json, b.json") in report.facts


def test_skipped_layers_fail_every_role(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, a=np.array([1.0]), neg=np.array([-1.0]))
    rep = analyze_dump(path, RATIO_EPS, skip_unreadable=True)
    gate = evaluate_gate(rep)
    assert gate.passed  # what was read passes ...
    report = RatioReporter(RenderOptions(gate=gate)).checks(rep)
    assert not report.passed and report.failed[0].rule == "ratio/unreadable"  # ... the run not
    assert RatioReporter(RenderOptions(gate=gate)).document(rep)["skipped"][0]["name"] == "neg"
    out = RatioReporter(RenderOptions(gate=gate)).text(rep)
    assert "SKIPPED (unreadable, not analysed): neg: negative q -1.0" in out
    assert out.splitlines()[-1] == "INCOMPLETE (1 layer(s) skipped): PASS: no violations"


def test_quantity_helpers() -> None:
    q, v = SimpleNamespace(quantity="q", name="a"), SimpleNamespace(quantity="v", name="b\n")
    assert [quantity_label(x) for x in ([q], [v], [q, v], [])] == ["q", "v", "q|v", "q"]
    assert quantity_kind([q], True) == "raw activations, q = mean(x^2) over the last axis"
    assert quantity_kind([v], False) == "v values (LayerNorm variance)"
    assert quantity_kind([q, v], False).endswith("for the LayerNorm layers b\\x0a: v values")
    assert quantity_kind([q, v], False, str).endswith("for the LayerNorm layers b\n: v values")
    item = SimpleNamespace(safe_eps=2e-8, safe_eps_margin=float("-inf"), safe_eps_note="")
    assert safe_eps_document(item) == {
        "safe_eps": 2e-8,
        "safe_eps_margin_decades": "-inf",
        "safe_eps_note": "",
    }

"""reports/commands/compare.py: the compare report of a small dump in each role (document,
text, checks), stating the moved counts, the factors and changes that numpy gives for
``factor = sqrt((q + eps_from) / (q + eps_to))``; ties at the tolerance, the budget, zero
vectors, nonfinite values, the --to side's safe eps and hostile names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.analysis import evaluate_gate
from rmsnorm_eps.compare.analysis import CompareReport, compare_dump
from rmsnorm_eps.reports.commands.compare import (
    COMPARE_RULES,
    CompareReporter,
)
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.schema import load_schema
from tests.unit.report_cases import HOSTILE_LAYER

EPS_FROM, EPS_TO, TOL = 1e-6, 1e-5, 0.01
A = np.array([1e-7, 1e-5, 1e-3, 1.0], np.float64)
B = np.array([1.0, 2.0, 0.0], np.float64)


def _change(q: np.ndarray) -> np.ndarray:
    """Independent: y_to / y_from - 1 for eps inside the square root, in float64."""
    return np.sqrt((q + EPS_FROM) / (q + EPS_TO)) - 1.0


@pytest.fixture
def report(tmp_path: Path) -> CompareReport:
    path = tmp_path / "c.npz"
    np.savez(path, a=A, b=B)
    return compare_dump(path, f"eps={EPS_FROM}", f"eps={EPS_TO}", top_k=4)


def test_document_figures_are_numpys(report: CompareReport) -> None:
    doc = CompareReporter(RenderOptions(gate=evaluate_gate(report))).document(report)
    jsonschema.Draft202012Validator(load_schema("compare")).validate(doc)
    change = _change(A)
    moved = int(np.sum(np.abs(change) > TOL))
    assert moved == 2
    a, b = doc["layers"]
    assert (a["moved"], a["violations"], a["count"]) == (moved, moved, 4)
    assert a["max_abs_change"] == pytest.approx(np.abs(change).max(), rel=1e-12)
    assert a["min_factor"] == pytest.approx((1 + change).min(), rel=1e-12)
    assert [w["index"] for w in a["worst"]] == [[i] for i in np.argsort(-np.abs(change))]
    assert [w["change"] for w in a["worst"]] == pytest.approx(
        change[np.argsort(-np.abs(change))].tolist(), rel=1e-10
    )
    assert (b["zero"], b["moved"]) == (1, 0)  # a zero vector's output is 0 under any eps
    assert doc["summary"]["moved"] == moved and doc["summary"]["zero"] == 1
    assert doc["from"]["eps"] == EPS_FROM and doc["to"]["eps"] == EPS_TO
    assert doc["tolerance"] == TOL and doc["gate"]["passed"] is False
    # the --to side's safe eps: min positive q / min_ratio(tolerance)
    bound = (1 - TOL) ** 2 / (1 - (1 - TOL) ** 2)
    assert doc["safe_eps_bound"]["min_ratio"] == pytest.approx(bound, rel=1e-12)
    assert a["safe_eps"] == pytest.approx(A.min() / bound, rel=1e-12)
    assert (a["within_safe_eps"], b["within_safe_eps"]) == (False, True)
    assert doc["summary"]["within_safe_eps"] is False


def test_text_tables_and_total(report: CompareReport) -> None:
    gate = evaluate_gate(report)
    out = CompareReporter(RenderOptions(gate=gate)).text(report)
    lines = out.splitlines()
    assert lines[1:4] == [
        "from: eps=1e-06 inside float64",
        "to:   eps=1e-05 inside float64",
        "factor = y_to/y_from per input; moved when |factor - 1| > 0.01",
    ]
    change = _change(A)
    row = next(line.split() for line in lines if line.split()[:1] == ["a"])
    assert row[1:] == [
        "4",
        "0",
        f"{np.abs(change).max():.6g}",
        f"{(1 + change).min():.6g}",
        f"{(1 + change).max():.6g}",
        "2",
        "50%",
    ]
    assert "--to eps within the safe eps: no, in 1 layer(s): a" in lines
    assert "a: largest |change| (4 input(s))" in lines
    assert lines[-2].startswith("Total: 2 violation(s) in 1 of 2 layer(s) (2 moved by more")
    assert lines[-1] == "FAIL: 2 violation(s), none allowed"


def test_checks_two_per_layer_with_unrounded_numbers(report: CompareReport) -> None:
    rep = CompareReporter().checks(report)
    assert rep.rules == COMPARE_RULES and rep.source == report.source
    assert [(c.rule, c.name, c.passed) for c in rep.checks] == [
        ("compare/moved", "a", False),
        ("compare/nonfinite", "a", True),
        ("compare/moved", "b", True),
        ("compare/nonfinite", "b", True),
    ]
    moved = rep.checks[0]
    assert moved.level == "error" and moved.numbers["moved"] == 2
    assert moved.numbers["max_abs_change"] == pytest.approx(abs(_change(A)).max(), rel=1e-12)
    assert moved.numbers["within_safe_eps"] == "no"
    assert moved.message.startswith("a: 2 of 4 inputs (50%) move by more than 0.01;")
    assert rep.verdict == "2 violation(s)" and not rep.passed


def test_checks_at_the_tolerance_pass_and_just_below_fail(write_npy: Callable[..., Path]) -> None:
    path = write_npy(np.array([1e-3, 1.0]))
    first = compare_dump(path, f"eps={EPS_FROM}", f"eps={EPS_TO}", tolerance=0.1)
    worst = first.max_abs_change
    assert worst is not None and worst == pytest.approx(abs(_change(np.array([1e-3]))[0]))
    tie = compare_dump(path, f"eps={EPS_FROM}", f"eps={EPS_TO}", tolerance=worst)
    assert CompareReporter().checks(tie).passed  # |change| == tolerance passes
    below = float(np.nextafter(worst, 0.0))
    over = compare_dump(path, f"eps={EPS_FROM}", f"eps={EPS_TO}", tolerance=below)
    assert (
        not CompareReporter().checks(over).passed
        and CompareReporter().checks(over).failed[0].numbers["moved"] == 1
    )


def test_budget_makes_warnings(report: CompareReport) -> None:
    within = CompareReporter(RenderOptions(gate=evaluate_gate(report, max_violations=2))).checks(
        report
    )
    assert within.passed and [c.level for c in within.failed] == ["warning"]
    assert dict(within.facts)["verdict"].startswith("PASS: ")
    assert (
        not CompareReporter(RenderOptions(gate=evaluate_gate(report, max_violations=1)))
        .checks(report)
        .passed
    )


def test_zero_is_violation_and_nonfinite(tmp_path: Path) -> None:
    path = tmp_path / "z.npz"
    np.savez(path, z=np.array([0.0, 1.0]), n=np.array([np.nan, np.inf, 1.0]))
    rep = compare_dump(path, "eps=1e-6", "eps=1e-5", zero_is_violation=True)
    report = CompareReporter().checks(rep)
    failed = {(c.rule, c.name): c for c in report.failed}
    assert set(failed) == {("compare/moved", "z"), ("compare/nonfinite", "n")}
    assert "1 zero vector(s), each a violation" in failed["compare/moved", "z"].message
    assert failed["compare/nonfinite", "n"].numbers == {
        "count": 3,
        "nonfinite": 2,
        "nan": 1,
        "inf": 1,
        "nonfinite_factor": 0,
    }
    doc = CompareReporter().document(rep)
    assert doc["zero_is_violation"] is True and doc["summary"]["nonfinite"] == 2


def test_hostile_layer_name_escaped_in_text(tmp_path: Path) -> None:
    path = tmp_path / "h.npz"
    np.savez(path, **{HOSTILE_LAYER: A})  # type: ignore[arg-type]
    rep = compare_dump(path, "eps=1e-6", "eps=1e-5")
    out = CompareReporter(RenderOptions()).text(rep)
    assert "\x1b" not in out and "\u202e" not in out and "##[" not in out
    assert "\\x1b[31m\\x0a:error:pwn" in out
    assert CompareReporter().checks(rep).checks[0].name == HOSTILE_LAYER
    assert CompareReporter().document(rep)["layers"][0]["name"] == HOSTILE_LAYER

"""reports/commands/parity.py: an implementation's outputs on the probe set against the
float64 reference, in each role: failing elements per category as the error rule
``|a - r| <= atol + rtol |r|`` gives them by numpy, the nonfinite check, the inferred eps,
the source file of ``FILE [KEY]``, and hostile sources escaped in the text."""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.parity.api import ParityResult, compare_outputs
from rmsnorm_eps.parity.probe_set import CATEGORIES, ProbeSet
from rmsnorm_eps.parity.probes import make_probes
from rmsnorm_eps.reports.commands.parity import (
    PARITY_RULES,
    ParityReporter,
    eps_summary,
)
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.schema import load_schema

EPS = 1e-6


@pytest.fixture(scope="module")
def probes() -> ProbeSet:
    return make_probes(8, EPS)


def _rmsnorm(probes: ProbeSet, eps: float) -> np.ndarray:
    """An implementation: y = g x / sqrt(mean(x^2) + eps), float64, stored as float32."""
    x = np.asarray(probes.inputs, np.float64)
    q = np.mean(x**2, axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        return (np.asarray(probes.gain, np.float64) * x / np.sqrt(q + eps)).astype(np.float32)


def _failing(probes: ProbeSet, y: np.ndarray, atol: float, rtol: float) -> dict[str, int]:
    ref = np.asarray(probes.reference, np.float64)
    a = y.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.abs(a - ref) <= atol + rtol * np.abs(ref)
    ok |= (a == ref) & np.isinf(ref)  # the same infinity
    return {
        name: int(np.sum(~ok[probes.category == i]))
        for i, name in enumerate(CATEGORIES)
        if np.any(probes.category == i)
    }


@pytest.fixture(scope="module")
def without_eps(probes: ProbeSet) -> tuple[ParityResult, np.ndarray]:
    y = _rmsnorm(probes, 0.0)
    res = compare_outputs(probes, y, output_dtype="float32", actual_source="out.npy [y]")
    return res, y


def test_checks_fail_where_numpy_says_the_rule_fails(
    probes: ProbeSet, without_eps: tuple[ParityResult, np.ndarray]
) -> None:
    res, y = without_eps
    report = ParityReporter().checks(res)
    assert report.rules == PARITY_RULES
    tol = res.tolerance
    assert (tol.rule, tol.atol, tol.rtol) == ("torch", 1e-5, 1.3e-6)  # torch.testing float32
    failing = _failing(probes, y, tol.atol, tol.rtol)
    by_name = {c.name: c for c in report.checks if c.rule == "parity/tolerance"}
    assert list(by_name) == list(failing)
    for name, n in failing.items():
        assert by_name[name].numbers["failing"] == n, name
        assert by_name[name].passed is (n == 0), name
    assert [n for n, k in failing.items() if k] == ["zero", "tiny", "near-eps", "at-bound"]
    # without eps the zero row is 0/0: NaN, a failing nonfinite output
    nonfinite = [c for c in report.failed if c.rule == "parity/nonfinite"]
    assert [c.name for c in nonfinite] == ["zero"]
    assert nonfinite[0].numbers["nan"] == int(np.isnan(y[probes.category == 0]).sum()) == 8
    assert report.source == "out.npy"  # the file of "FILE [KEY]"
    assert report.verdict == "4 of 9 categories fail: zero, tiny, near-eps, at-bound"


def test_eps_inside_passes_and_is_inferred(probes: ProbeSet) -> None:
    y = _rmsnorm(probes, EPS)
    res = compare_outputs(probes, y, output_dtype="float32", actual_source="ok.npy")
    tol = res.tolerance
    assert not any(_failing(probes, y, tol.atol, tol.rtol).values())
    report = ParityReporter().checks(res)
    assert report.passed and report.counts["failed"] == 0
    assert report.verdict == f"all {len(res.categories)} categories within tolerance"
    assert res.inference.eps is not None
    assert res.inference.eps == pytest.approx(EPS, rel=0.05)
    summary = eps_summary(res.inference)
    assert summary.startswith(f"{res.inference.eps:.6g}")
    assert summary.endswith(f"{res.inference.eps / EPS:.4g}x configured 1e-06")


def test_document_summary_matches_checks(without_eps: tuple[ParityResult, np.ndarray]) -> None:
    res, _ = without_eps
    doc = ParityReporter().document(res)
    jsonschema.Draft202012Validator(load_schema("parity")).validate(doc)
    assert doc["command"] == "parity"
    cats = {c["name"]: c for c in doc["categories"]}
    report = ParityReporter().checks(res)
    for c in report.checks:
        if c.rule == "parity/tolerance":
            assert cats[c.name]["failing"] == c.numbers["failing"], c.name
    assert doc["summary"]["failing_categories"] == ["zero", "tiny", "near-eps", "at-bound"]


def test_text_rows_and_escaped_sources(
    probes: ProbeSet, without_eps: tuple[ParityResult, np.ndarray]
) -> None:
    res, y = without_eps
    out = ParityReporter(RenderOptions()).text(res)
    lines = out.splitlines()
    assert lines[0] == "outputs out.npy [y] (float32)"
    assert lines[3] == "rule torch: pass if |a - r| <= atol + rtol * |r|; atol 1e-05, rtol 1.3e-06"
    tiny = next(line.split() for line in lines if line.split()[:1] == ["tiny"])
    n = int(np.sum(probes.category == CATEGORIES.index("tiny")))
    assert tiny[1:3] == [str(n), f"{n * 8}/{n * 8}"] and tiny[-1] == "FAIL"
    hostile = compare_outputs(
        probes, y, output_dtype="float32", actual_source="o\x1b[2J\n::error::x ##[y].npy"
    )
    shown = ParityReporter(RenderOptions()).text(hostile)
    assert (
        shown.splitlines()[0] == "outputs o\\x1b[2J\\x0a\\x3a:error\\x3a:x \\x23#[y].npy (float32)"
    )
    assert "\x1b" not in shown

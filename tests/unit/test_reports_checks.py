"""reports/checks.py: the format-neutral check report (counts, failed checks, sources, rules),
the unreadable rule and :func:`with_skipped`, the number and verdict helpers, and a gate's
checks passing and failing on the right side of its threshold (unrounded values)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.reports import check_report
from rmsnorm_eps.reports.checks import (
    Check,
    CheckReport,
    Rule,
    g,
    unreadable_rule,
    verdict_fact,
    with_skipped,
)

RULES = (Rule("x/a", "a", "rule a"), Rule("x/b", "b", "rule b", "warning"))


def _report(*checks: Check, source: str | None = "dump.npz") -> CheckReport:
    return CheckReport(
        command="x",
        title="rmsnorm-eps x",
        source=source,
        subject="layer",
        rules=RULES,
        checks=checks,
        passed=not any(c.level == "error" for c in checks),
        verdict="v",
        facts=(("source", "dump.npz"), verdict_fact(True, "v")),
    )


CHECKS = (
    Check("x/a", "l0", True, "note", "ok"),
    Check("x/a", "l1", False, "error", "bad", {"n": 3}),
    Check("x/b", "l1", False, "warning", "meh", source="shard1.npz"),
    Check("x/b", "l2", False, "error", "bad", source="dump.npz"),
    Check("x/a", "l3", True, "note", "ok", source="shard2.npz"),
)


def test_counts_and_failed_tally_each_check_once() -> None:
    rep = _report(*CHECKS)
    assert rep.counts == {
        "checks": 5,
        "passed": 2,
        "failed": 3,
        "error": 2,
        "warning": 1,
        "note": 2,
    }
    assert [(c.name, c.rule) for c in rep.failed] == [("l1", "x/a"), ("l1", "x/b"), ("l2", "x/b")]
    assert _report().counts == dict.fromkeys(("checks", "passed", "failed", "error"), 0) | {
        "warning": 0,
        "note": 0,
    }


def test_sources_report_first_each_once_and_source_of_falls_back() -> None:
    rep = _report(*CHECKS)
    assert rep.sources == ("dump.npz", "shard1.npz", "shard2.npz")
    assert rep.source_of(CHECKS[0]) == "dump.npz"  # no own source: the report's
    assert rep.source_of(CHECKS[2]) == "shard1.npz"
    merged = _report(*CHECKS, source=None)  # a merged report has no file of its own
    assert merged.sources == ("shard1.npz", "dump.npz", "shard2.npz")
    assert merged.source_of(CHECKS[0]) is None


def test_rule_lookup_by_id() -> None:
    rep = _report()
    assert rep.rule("x/b") is RULES[1] and rep.rule("x/b").level == "warning"
    with pytest.raises(KeyError, match="x/c"):
        rep.rule("x/c")


def test_unreadable_rule_names_its_command() -> None:
    rule = unreadable_rule("compare")
    assert (rule.id, rule.name, rule.level) == ("compare/unreadable", "unreadable", "error")
    assert "--skip-unreadable" in rule.description


def test_with_skipped_adds_one_failing_error_per_layer_and_fails_the_verdict() -> None:
    rep = _report(CHECKS[0])
    assert rep.passed
    assert with_skipped(rep, ()) is rep
    skipped = (
        SimpleNamespace(name="bad0", problem="CRC-32 mismatch"),
        SimpleNamespace(name="bad1", problem="truncated"),
    )
    out = with_skipped(rep, skipped)
    assert not out.passed
    assert out.rules == (*RULES, unreadable_rule("x"))
    assert out.checks[0] == CHECKS[0]
    added = out.checks[1:]
    assert [(c.rule, c.name, c.passed, c.level, dict(c.numbers)) for c in added] == [
        ("x/unreadable", "bad0", False, "error", {}),
        ("x/unreadable", "bad1", False, "error", {}),
    ]
    assert added[0].message == "bad0: unreadable, not analysed: CRC-32 mismatch"
    assert out.verdict == "incomplete: 2 unreadable layer(s) skipped; v"
    assert out.counts["error"] == 2 and out.counts["note"] == 1
    # the old verdict fact is replaced (one verdict, last), the skipped fact added before it
    assert out.facts == (
        ("source", "dump.npz"),
        ("skipped", "2 unreadable layer(s): bad0, bad1"),
        ("verdict", "FAIL: incomplete: 2 unreadable layer(s) skipped; v"),
    )


def test_g_and_verdict_fact() -> None:
    assert g(None) == "-"
    assert g(49.25125628140703) == "49.2513"
    assert g(49.25125628140703, 12) == "49.2512562814"
    assert g(1e-300, 3) == "1e-300"
    assert verdict_fact(True, "no violations") == ("verdict", "PASS: no violations")
    assert verdict_fact(False, "2 violation(s)") == ("verdict", "FAIL: 2 violation(s)")


@pytest.mark.parametrize(
    ("above", "passes"),
    [
        (False, True),  # min_ratio == q/eps exactly: ties pass
        (True, False),  # min_ratio one ulp above q/eps: shown as the same number, still fails
    ],
)
def test_a_ratio_check_passes_at_the_bound_and_fails_one_ulp_above(
    write_npy: Callable[..., Path], above: bool, passes: bool
) -> None:
    eps = 1e-6
    path = write_npy(np.array([1.0, 2.0], np.float64))
    ratio = float(np.float64(1.0) / np.float64(eps))  # the smallest q/eps of the dump
    bound = float(np.nextafter(ratio, np.inf)) if above else ratio
    rep = analyze_dump(path, eps, min_ratio=bound)
    assert rep.min_ratio == bound
    checked = check_report(rep, evaluate_gate(rep))
    below = checked.checks[0]
    assert below.rule == "ratio/below-bound"
    assert below.passed is passes and checked.passed is passes
    assert below.level == ("note" if passes else "error")
    assert below.numbers["below_bound"] == (0 if passes else 1)
    assert g(ratio, 12) == g(bound, 12)  # rounded alike: only the unrounded values differ


def test_a_fraction_budget_compares_the_unrounded_fraction(
    write_npy: Callable[..., Path],
) -> None:
    """1 violation in 3 inputs: fraction 0.333...; a budget of 0.3333 (which the fraction
    rounds to at 4 digits) fails, a budget of 1/3 passes, and the failed check is then a
    warning (within the budget), else an error."""
    path = write_npy(np.array([1e-9, 1.0, 1.0], np.float64))
    rep = analyze_dump(path, 1e-6)
    assert (rep.violations, rep.count) == (1, 3)
    tight = check_report(rep, evaluate_gate(rep, None, 0.3333))
    assert not tight.passed and [c.level for c in tight.failed] == ["error"]
    exact = check_report(rep, evaluate_gate(rep, None, 1 / 3))
    assert exact.passed and [c.level for c in exact.failed] == ["warning"]

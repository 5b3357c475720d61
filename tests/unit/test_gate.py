"""Unit tests of rmsnorm_eps.gate: budgets (ties pass), invalid budgets, the verdict word."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.gate import evaluate_gate
from rmsnorm_eps.sources import Unreadable


@dataclass
class _Report:
    violations: int
    count: int
    skipped: tuple[Unreadable, ...] = ()

    @property
    def violation_fraction(self) -> float:
        return self.violations / self.count if self.count else 0.0


def test_no_budget_passes_only_without_violations() -> None:
    assert evaluate_gate(_Report(0, 10)).passed
    gate = evaluate_gate(_Report(1, 10))
    assert not gate.passed and gate.reason == "1 violation(s), none allowed"
    assert gate.verdict == "FAIL"


def test_count_budget_tie_passes() -> None:
    assert evaluate_gate(_Report(3, 10), max_violations=3).passed
    gate = evaluate_gate(_Report(4, 10), max_violations=3)
    assert not gate.passed and gate.reason == "over budget: 4 > 3"


def test_fraction_budget_compares_unrounded() -> None:
    assert evaluate_gate(_Report(1, 4), max_fraction=0.25).passed
    gate = evaluate_gate(_Report(1_000_001, 4_000_000), max_fraction=0.25)
    assert not gate.passed  # 0.25000025 > 0.25, though it prints as 0.25
    assert "fraction 0.25 > 0.25" in gate.reason


def test_both_budgets_must_hold() -> None:
    gate = evaluate_gate(_Report(2, 10), max_violations=5, max_fraction=0.1)
    assert not gate.passed and gate.reason == "over budget: 2 <= 5, fraction 0.2 > 0.1"


@pytest.mark.parametrize(("n", "f"), [(-1, None), (None, -0.1), (None, 1.5)])
def test_invalid_budgets(n: int | None, f: float | None) -> None:
    with pytest.raises(InvalidParameterError):
        evaluate_gate(_Report(0, 1), n, f)


def test_skipped_members_make_the_verdict_incomplete() -> None:
    gate = evaluate_gate(_Report(0, 10, (Unreadable("b", "bad CRC"),)))
    assert gate.passed and gate.incomplete
    assert gate.verdict == "INCOMPLETE"
    assert evaluate_gate(_Report(0, 10)).verdict == "PASS"

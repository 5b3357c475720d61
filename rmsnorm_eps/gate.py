"""The CI gate: budgets of violations, the pass/fail decision and its verdict word.

:func:`evaluate_gate` takes any report with ``violations`` and ``violation_fraction`` (ratio,
compare, merge, parity) and the budgets the user allows, and returns a frozen
:class:`GateResult`. A report that left part of its input unchecked (``skipped`` members,
``--skip-unreadable``) is INCOMPLETE whatever its figures: :attr:`GateResult.verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rmsnorm_eps.errors import InvalidParameterError

__all__ = ["GateResult", "GateSubject", "evaluate_gate"]


@dataclass(frozen=True)
class GateResult:
    """CI decision: ``passed`` is False when violations exceed the allowed budget.

    ``incomplete`` is True when the report skipped unreadable members: its verdict is then
    INCOMPLETE (and the CLI never exits 0), whatever ``passed`` says about what was read.
    """

    passed: bool
    violations: int
    fraction: float
    max_violations: int | None
    max_fraction: float | None
    reason: str
    incomplete: bool = False

    @property
    def verdict(self) -> str:
        """``INCOMPLETE``, ``PASS`` or ``FAIL``."""
        return "INCOMPLETE" if self.incomplete else "PASS" if self.passed else "FAIL"


class GateSubject(Protocol):
    """What :func:`evaluate_gate` needs from a report: its violation count and fraction."""

    @property
    def violations(self) -> int: ...

    @property
    def violation_fraction(self) -> float: ...


def check_budgets(max_violations: int | None, max_fraction: float | None) -> None:
    """Refuse a negative count budget or a fraction budget outside [0, 1]."""
    if max_violations is not None and max_violations < 0:
        raise InvalidParameterError(f"max-violations must be >= 0, got {max_violations}")
    if max_fraction is not None and not (0.0 <= max_fraction <= 1.0):
        raise InvalidParameterError(f"max-fraction must be in [0, 1], got {max_fraction}")


def _budget_reason(
    v: int, frac: float, max_violations: int | None, max_fraction: float | None
) -> tuple[bool, str]:
    ok_n = max_violations is None or v <= max_violations
    ok_f = max_fraction is None or frac <= max_fraction
    parts = []
    if max_violations is not None:
        parts.append(f"{v} <= {max_violations}" if ok_n else f"{v} > {max_violations}")
    if max_fraction is not None:
        sign = "<=" if ok_f else ">"
        parts.append(f"fraction {frac:.6g} {sign} {max_fraction:g}")
    passed = ok_n and ok_f
    return passed, ("within budget: " if passed else "over budget: ") + ", ".join(parts)


def evaluate_gate(
    report: GateSubject,
    max_violations: int | None = None,
    max_fraction: float | None = None,
) -> GateResult:
    """Pass when violations (below bound + nonfinite) fit every budget given (default: none).

    ``report`` is any object with ``violations`` and ``violation_fraction`` (a ratio report, a
    compare report, ...); when it has a non-empty ``skipped`` the result is ``incomplete``.

    Budgets compare unrounded values: ``violations <= max_violations`` and
    ``violations / count <= max_fraction``.
    """
    check_budgets(max_violations, max_fraction)
    v = report.violations
    frac = report.violation_fraction
    if max_violations is None and max_fraction is None:
        passed = v == 0
        reason = "no violations" if passed else f"{v} violation(s), none allowed"
    else:
        passed, reason = _budget_reason(v, frac, max_violations, max_fraction)
    incomplete = bool(getattr(report, "skipped", ()))
    return GateResult(passed, v, frac, max_violations, max_fraction, reason, incomplete)

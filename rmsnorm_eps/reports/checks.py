"""A format-neutral "check report": what the CI formats (markdown, github, junit, sarif) render.

Every command that gates turns its result into a :class:`CheckReport`: a flat list of
:class:`Check` objects, one per (subject, rule) pair, e.g. one per layer for each of the
``ratio`` rules ``below-bound`` and ``nonfinite``. The CI reporters only know this model, so a
new command gets all four formats from one method ``checks(result) -> CheckReport`` of its
reporter (see :mod:`rmsnorm_eps.reports.interface`).

Levels follow SARIF: ``error`` (a violation that fails the gate), ``warning`` (a violation the
gate's budget allows), ``note`` (a passing check, for completeness).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Check",
    "CheckReport",
    "Level",
    "Number",
    "Rule",
    "g",
    "unreadable_rule",
    "verdict_fact",
    "with_skipped",
]

Level = Literal["error", "warning", "note"]
Number = float | int | str | None


@dataclass(frozen=True)
class Rule:
    """A kind of check: ``id`` is stable (SARIF ruleId, JUnit classname), ``name`` short;
    ``level`` is the level of a failure that fails the gate (SARIF defaultConfiguration):
    ``warning`` for rules whose failures are notes that never fail it."""

    id: str
    name: str
    description: str
    level: Level = "error"


@dataclass(frozen=True)
class Check:
    """One check of one subject (``name``: a layer, a module, a config key) against a rule.

    ``numbers`` holds the unrounded figures behind the verdict (None for "not defined",
    e.g. the minimum q/eps of a layer without a finite value). ``source`` is the file this
    check points at when it is not the report's (a merged report: the shard of the worst input).
    """

    rule: str
    name: str
    passed: bool
    level: Level
    message: str
    numbers: Mapping[str, Number] = field(default_factory=dict)
    source: str | None = None


@dataclass(frozen=True)
class CheckReport:
    """Checks of one command run, plus the facts a human summary shows first.

    ``passed`` is the gate's verdict (a budget may let failed checks pass the gate);
    ``facts`` are (label, display text) pairs; ``subject`` names what ``Check.name`` is.
    """

    command: str
    title: str
    source: str | None
    subject: str
    rules: tuple[Rule, ...]
    checks: tuple[Check, ...]
    passed: bool
    verdict: str
    facts: tuple[tuple[str, str], ...] = ()

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def counts(self) -> dict[str, int]:
        """Summary counts: checks, passed, failed, error, warning, note."""
        out = {
            "checks": len(self.checks),
            "passed": 0,
            "failed": 0,
            "error": 0,
            "warning": 0,
            "note": 0,
        }
        for c in self.checks:
            out["passed" if c.passed else "failed"] += 1
            out[c.level] += 1
        return out

    def source_of(self, check: Check) -> str | None:
        """The file a check points at: its own source, else the report's."""
        return check.source if check.source is not None else self.source

    @property
    def sources(self) -> tuple[str, ...]:
        """Every file the report points at, the report's first, each once."""
        out = [self.source] if self.source is not None else []
        for c in self.checks:
            if c.source is not None and c.source not in out:
                out.append(c.source)
        return tuple(out)

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)


def unreadable_rule(command: str) -> Rule:
    """``<command>/unreadable``: a layer --skip-unreadable left out (always an error)."""
    return Rule(
        f"{command}/unreadable",
        "unreadable",
        "Layers that could not be read (a bad CRC-32, a truncated member, an unsupported dtype, "
        "a negative q) and were left out with --skip-unreadable: not analysed, so the run "
        "never passes.",
    )


def with_skipped(report: CheckReport, skipped: tuple[Any, ...]) -> CheckReport:
    """``report`` plus one failing ``error`` check per layer skipped as unreadable (rule
    ``<command>/unreadable``, numbers empty: nothing was measured), a ``skipped`` fact, and a
    failed verdict: part of the dump was not checked, whatever the gate's budget says (the
    command's exit code is 1 then, even with --exit-zero). Unchanged when nothing was skipped.
    """
    if not skipped:
        return report
    from dataclasses import replace

    rule = unreadable_rule(report.command)
    checks = tuple(
        Check(rule.id, u.name, False, "error", f"{u.name}: unreadable, not analysed: {u.problem}")
        for u in skipped
    )
    names = ", ".join(u.name for u in skipped)
    verdict = f"incomplete: {len(skipped)} unreadable layer(s) skipped; {report.verdict}"
    facts = (
        *(f for f in report.facts if f[0] != "verdict"),
        ("skipped", f"{len(skipped)} unreadable layer(s): {names}"),
        ("verdict", "FAIL: " + verdict),
    )
    return replace(
        report,
        rules=(*report.rules, rule),
        checks=report.checks + checks,
        passed=False,
        verdict=verdict,
        facts=facts,
    )


def g(value: float | None, digits: int = 6) -> str:
    """A number for display (check messages and text reports): ``digits`` significant
    digits, '-' for None."""
    return "-" if value is None else f"{value:.{digits}g}"


def verdict_fact(passed: bool, verdict: str) -> tuple[str, str]:
    """The ``verdict`` fact: ``PASS: ...`` or ``FAIL: ...``."""
    return ("verdict", ("PASS: " if passed else "FAIL: ") + verdict)

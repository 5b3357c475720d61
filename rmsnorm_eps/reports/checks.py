"""A format-neutral "check report": what the CI formats (markdown, github, junit, sarif) render.

Every command that gates turns its result into a :class:`CheckReport`: a flat list of
:class:`Check` objects, one per (subject, rule) pair, e.g. one per layer for each of the
``ratio`` rules ``below-bound`` and ``nonfinite``. The CI reporters only know this model, so a
new command needs one adapter function ``(result, gate) -> CheckReport`` registered by name in
:data:`ADAPTERS` (a string map, so nothing is imported until a result is rendered).

Levels follow SARIF: ``error`` (a violation that fails the gate), ``warning`` (a violation the
gate's budget allows), ``note`` (a passing check, for completeness).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rmsnorm_eps.reports import UnsupportedResult

__all__ = [
    "ADAPTERS",
    "Check",
    "CheckReport",
    "Level",
    "Rule",
    "bound_checks",
    "check_report",
    "ratio_checks",
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


# ----------------------------------------------------------------------------- adapters
#: ``module.QualName`` of a result type -> ``module:function`` building its CheckReport.
#: Adding a command's CI formats is one line here plus that function.
ADAPTERS: dict[str, str] = {
    "rmsnorm_eps.analysis.RatioReport": "rmsnorm_eps.reports.checks:ratio_checks",
    "rmsnorm_eps.bound.BoundResult": "rmsnorm_eps.reports.checks:bound_checks",
    "rmsnorm_eps.compare.analysis.CompareReport": (
        "rmsnorm_eps.reports.command_checks:compare_checks"
    ),
    "rmsnorm_eps.compare.precision.PrecisionReport": (
        "rmsnorm_eps.reports.command_checks:precision_checks"
    ),
    "rmsnorm_eps.parity.api.ParityResult": "rmsnorm_eps.reports.command_checks:parity_checks",
    "rmsnorm_eps.config.resolve.ConfigDiff": (
        "rmsnorm_eps.reports.command_checks:config_diff_checks"
    ),
}


def _adapter(result: object) -> Callable[[Any, Any], CheckReport] | None:
    for klass in type(result).__mro__:
        target = ADAPTERS.get(f"{klass.__module__}.{klass.__qualname__}")
        if target is not None:
            module_name, _, func = target.partition(":")
            fn: Callable[[Any, Any], CheckReport] = getattr(
                importlib.import_module(module_name), func
            )
            return fn
    return None


def check_report(result: object, gate: Any = None) -> CheckReport:
    """The :class:`CheckReport` of ``result`` (unchanged when it already is one)."""
    if isinstance(result, CheckReport):
        return result
    fn = _adapter(result)
    if fn is None:
        raise UnsupportedResult(f"no check report for {type(result).__name__}")
    return fn(result, gate)


def _g(value: float, digits: int = 6) -> str:
    return f"{value:.{digits}g}"


RATIO_RULES = (
    Rule(
        "ratio/below-bound",
        "below-bound",
        "Inputs whose q/eps is below the bound, i.e. eps attenuates them by more than delta: "
        "A = sqrt(q/(q+eps)) < 1 - delta.",
    ),
    Rule(
        "ratio/nonfinite",
        "nonfinite",
        "NaN or +inf q values (each one counts as a violation).",
    ),
)


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


def ratio_checks(report: Any, gate: Any = None) -> CheckReport:
    """Two checks per layer of a :class:`~rmsnorm_eps.analysis.RatioReport`.

    ``below-bound`` fails when some finite q has ``q/eps < min_ratio`` (ties pass);
    ``nonfinite`` fails when some q is NaN or +inf. A failed check is an ``error`` unless the
    gate passed within its budget (then ``warning``).
    """
    passed = report.violations == 0 if gate is None else bool(gate.passed)
    bad: Level = "warning" if passed else "error"
    bound = report.min_ratio
    # `merge` reports are ratio reports of shards concatenated along axis 0: a check points at
    # the shard holding its worst input, and the report has no single file
    shards: tuple[str, ...] = tuple(getattr(report, "shards", ()))

    def shard_of(item: Any) -> tuple[str, str | None]:
        s = getattr(item, "shard", None)
        if not shards or s is None:
            return "", None
        inner = list(item.shard_index or ())
        return f" (shard {s} {shards[s]} at {inner})", shards[s]

    checks: list[Check] = []
    for layer in report.layers:
        finite = layer.count - layer.nonfinite
        below = layer.below_bound
        nums: dict[str, Number] = {
            "eps": layer.eps,
            "count": layer.count,
            "finite": finite,
            "below_bound": below,
            "fraction": below / layer.count if layer.count else 0.0,
            "min_ratio": layer.min_ratio,
            "min_attenuation": layer.min_attenuation,
            "bound_min_ratio": bound,
            "delta": report.delta,
        }
        loc: str | None = None
        if below:
            w = layer.worst[0] if layer.worst else None
            where = f" at index {list(w.index)}" if w is not None else ""
            if w is not None:
                in_shard, loc = shard_of(w)
                where += in_shard
            msg = (
                f"{layer.name}: {below} of {layer.count} inputs "
                f"({_g(100.0 * below / layer.count, 3)}%) have q/eps below {_g(bound, 12)} "
                f"(A < {_g(1.0 - report.delta, 12)}); min q/eps {_g(layer.min_ratio)} "
                f"(A = {_g(layer.min_attenuation)}){where}"
            )
        elif finite:
            msg = (
                f"{layer.name}: all {finite} finite inputs have q/eps >= {_g(bound, 12)}; "
                f"min q/eps {_g(layer.min_ratio)} (A = {_g(layer.min_attenuation)})"
            )
        else:
            msg = f"{layer.name}: no finite q value to check"
        checks.append(
            Check(
                "ratio/below-bound",
                layer.name,
                below == 0,
                "note" if below == 0 else bad,
                msg,
                nums,
                loc,
            )
        )
        nf = layer.nonfinite
        nf_nums: dict[str, Number] = {
            "count": layer.count,
            "nonfinite": nf,
            "nan": layer.nan_count,
            "inf": layer.inf_count,
        }
        loc = None
        if nf:
            first = layer.nonfinite_examples[0] if layer.nonfinite_examples else None
            where = f", first at index {list(first.index)}" if first is not None else ""
            if first is not None:
                in_shard, loc = shard_of(first)
                where += in_shard
            msg = (
                f"{layer.name}: {nf} nonfinite q of {layer.count} inputs "
                f"({layer.nan_count} NaN, {layer.inf_count} inf){where}"
            )
        else:
            msg = f"{layer.name}: no NaN or inf among {layer.count} q values"
        checks.append(
            Check(
                "ratio/nonfinite",
                layer.name,
                nf == 0,
                "note" if nf == 0 else bad,
                msg,
                nf_nums,
                loc,
            )
        )
    verdict = (
        gate.reason
        if gate is not None
        else ("no violations" if passed else f"{report.violations} violation(s)")
    )
    kind = "activations (q = mean(x^2) over the last axis)" if report.raw else "q values"
    facts: tuple[tuple[str, str], ...] = (
        ("source", f"{report.source} ({kind})"),
        (
            "bound",
            f"A >= {_g(1.0 - report.delta, 12)} <=> q/eps >= {_g(bound, 12)} "
            f"(delta {_g(report.delta, 12)})",
        ),
        ("inputs", f"{report.count} in {len(report.layers)} layer(s)"),
        (
            "violations",
            f"{report.violations} ({report.below_bound} below the bound, "
            f"{report.nonfinite} nonfinite) in {len(report.layers_affected)} "
            f"layer(s)",
        ),
        ("verdict", ("PASS: " if passed else "FAIL: ") + verdict),
    )
    command = "merge" if shards else "ratio"
    if shards:
        facts = (facts[0], ("shards", ", ".join(shards)), *facts[1:])
    checked = CheckReport(
        command=command,
        title=f"rmsnorm-eps {command}: {report.source}",
        source=None if shards else report.source,
        subject="layer",
        rules=RATIO_RULES,
        checks=tuple(checks),
        passed=passed,
        verdict=verdict,
        facts=facts,
    )
    return with_skipped(checked, tuple(getattr(report, "skipped", ())))


def bound_checks(result: Any, gate: Any = None) -> CheckReport:
    """``bound`` checks nothing: a report of facts only (no checks, always passing)."""
    facts = [
        ("delta", _g(result.delta, 12)),
        ("A must be >=", _g(1.0 - result.delta, 12)),
        ("min q/eps", _g(result.min_ratio, 12)),
    ]
    if result.eps is not None:
        facts += [
            ("eps", _g(result.eps, 12)),
            ("min q", _g(result.min_q, 12)),
            ("min input RMS", _g(result.min_rms, 12)),
        ]
    return CheckReport(
        command="bound",
        title="rmsnorm-eps bound: A = sqrt(q/(q+eps)) >= 1 - delta",
        source=None,
        subject="bound",
        rules=(),
        checks=(),
        passed=True,
        verdict="nothing to check",
        facts=tuple(facts),
    )

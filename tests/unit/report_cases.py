"""Inputs the unit tests of the reporters share: a hostile name, a hand-built check report
holding it, and a small ratio dump whose counts a test can derive by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rmsnorm_eps.reports.checks import Check, CheckReport, Rule

#: Markup, an HTML tag and entity, a closing JUnit tag, an escape sequence, a newline,
#: GitHub and Azure workflow commands, table and code syntax, percent signs, a bidi override.
HOSTILE = "[red]x</testcase><b>&amp;\x1b[31m\n::error::pwn ##[group]##vso[|`t`%2C,:\u202e"
#: The same without ``::`` (in a dump that marks a companion array, not a layer).
HOSTILE_LAYER = HOSTILE.replace("::", ":")

RULES = (
    Rule("demo/bound", "bound", "q/eps below the bound"),
    Rule("demo/nan", "nan", "NaN values", "warning"),
)


def hostile_report(passed: bool = False) -> CheckReport:
    """Four checks on two subjects, one with :data:`HOSTILE` in its name, message, the
    report's source and a fact: one ``error``, one ``warning``, two passing notes."""
    checks = (
        Check("demo/bound", HOSTILE, False, "error", f"{HOSTILE}: 2 below", {"below": 2}),
        Check("demo/nan", HOSTILE, True, "note", f"{HOSTILE}: no NaN"),
        Check("demo/bound", "plain", True, "note", "plain: fine", {"min_ratio": 51.5}),
        Check(
            "demo/nan",
            "plain",
            False,
            "warning",
            "plain: 1 NaN",
            {"nan": 1, "x": float("nan"), "none": None},
            source=f"shard-{HOSTILE}.npz",
        ),
    )
    return CheckReport(
        command="demo",
        title=f"rmsnorm-eps demo: {HOSTILE}",
        source=f"dir/{HOSTILE}.npz",
        subject="layer",
        rules=RULES,
        checks=checks,
        passed=passed,
        verdict=f"1 violation(s) in {HOSTILE}",
        facts=(("source", HOSTILE), ("verdict", "FAIL: 1 violation(s)")),
    )


#: A ratio dump at eps 1e-6 (bound q/eps >= 49.25...): ``ok`` passes, ``bad`` has two q below
#: the bound (q/eps 1e-3 and 2e-3), ``nan`` one NaN, the hostile layer one q below.
RATIO_LAYERS = {
    "ok": np.array([1.0, 2.0], np.float64),
    "bad": np.array([1e-9, 2e-9, 1.0], np.float64),
    "nan": np.array([np.nan, 1.0], np.float64),
    HOSTILE_LAYER: np.array([1e-10, 1.0], np.float64),
}
RATIO_EPS = 1e-6


def write_ratio_dump(directory: Path) -> Path:
    """:data:`RATIO_LAYERS` as an .npz in ``directory``."""
    path = directory / "dump.npz"
    np.savez(path, **RATIO_LAYERS)  # type: ignore[arg-type]
    return path

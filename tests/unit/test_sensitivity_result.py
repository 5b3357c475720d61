"""sensitivity/result.py: the gate over each change's all-norms metrics: KL of either position
class above ``--max-kl`` fails (equal passes, NaN fails), top-1 of either class below
``--min-top1`` fails (equal passes), unknown classes (None) never fail; the reason counts the
changes."""

from __future__ import annotations

import dataclasses
import math

import pytest

from rmsnorm_eps.sensitivity.result import (
    Change,
    ChangeResult,
    Metrics,
    PassCount,
    SensitivityResult,
    evaluate_gate,
    failing,
    kl_fails,
    top1_fails,
)


def _m(
    kl: float | None = 0.01,
    kl_first: float | None = 0.01,
    top1: float | None = 0.99,
    top1_first: float | None = 1.0,
) -> Metrics:
    return Metrics(kl, kl_first, top1, top1_first, 0.5, 1e-4, 10.0, 100, 4)


def _result(*metrics: Metrics) -> SensitivityResult:
    changes = tuple(
        ChangeResult(Change(f"eps=1e-{i}", None, f"eps=1e-{i}", True), m, (), ())
        for i, m in enumerate(metrics, 1)
    )
    return SensitivityResult(
        "m", "texts", 4, 100, 4, (), changes, 9.5, PassCount(1.0, 0.0, 1.0, 3.0, 2, 1)
    )


def test_kl_fails() -> None:
    assert not kl_fails(_m(kl=1.0), None)
    assert not kl_fails(_m(kl=0.1, kl_first=0.1), 0.1)  # equal passes
    assert kl_fails(_m(kl=0.1000001), 0.1)
    assert kl_fails(_m(kl_first=0.2), 0.1)
    assert kl_fails(_m(kl=math.nan), 0.1)
    assert not kl_fails(_m(kl=None, kl_first=None), 0.0)


def test_top1_fails() -> None:
    assert not top1_fails(_m(top1=0.0), None)
    assert not top1_fails(_m(top1=0.9, top1_first=0.9), 0.9)
    assert top1_fails(_m(top1=0.8999), 0.9)
    assert top1_fails(_m(top1_first=0.5), 0.9)
    assert not top1_fails(_m(top1=None, top1_first=None), 1.0)


def test_evaluate_gate() -> None:
    res = _result(_m(), _m(kl=0.5), _m(top1=0.5))
    g = evaluate_gate(res, None, None)
    assert g.passed and g.failures == () and g.reason == "no gate (give --max-kl or --min-top1)"
    g = evaluate_gate(res, 0.1, None)
    assert (
        not g.passed
        and g.failures == ("eps=1e-2",)
        and g.reason
        == "1 of 3 change(s) exceed the gate: eps=1e-2: KL at positions >= 1 0.5 > --max-kl 0.1"
    )
    g = evaluate_gate(res, 0.1, 0.9)
    assert g.failures == ("eps=1e-2", "eps=1e-3")
    assert g.reason.startswith("2 of 3 change(s) exceed the gate: eps=1e-2: KL at positions")
    g = evaluate_gate(res, 1.0, 0.1)
    assert (
        g.passed
        and g.reason == "3 change(s) within the gate"
        and (g.max_kl, g.min_top1) == (1.0, 0.1)
    )


def test_records_are_frozen() -> None:
    res = _result(_m())
    assert SensitivityResult.command == "sensitivity" and res.gate is None and res.ranks == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.texts = 5  # type: ignore[misc]


def test_the_verdict_names_each_failing_criterion_change_and_position_class() -> None:
    res = _result(_m(kl=0.02, top1_first=0.5), _m(), _m(kl_first=0.3, top1=0.8))
    gate = evaluate_gate(res, 0.015, 0.9)
    assert gate.reason == (
        "2 of 3 change(s) exceed the gate: "
        "eps=1e-1: KL at positions >= 1 0.02 > --max-kl 0.015, "
        "top-1 at position 0 0.5 < --min-top1 0.9; "
        "eps=1e-3: top-1 at positions >= 1 0.8 < --min-top1 0.9, "
        "KL at position 0 0.3 > --max-kl 0.015"
    )
    assert failing(_m(), 0.015, 0.9) == []

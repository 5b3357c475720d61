"""reports/commands/sensitivity.py: a sensitivity result in each role: one ``kl`` and one
``top1`` check per change, failing on the right side of ``--max-kl`` / ``--min-top1``
(unrounded values: equal passes), the document valid against its schema with NaN as a
string, and the text tables (estimated rows marked ``~``, names escaped, columns aligned)."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.reports.commands.sensitivity import (
    SENSITIVITY_RULES,
    SensitivityReporter,
)
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.schema import load_schema
from rmsnorm_eps.sensitivity.result import (
    Change,
    ChangeResult,
    Metrics,
    NormInfo,
    NormRow,
    PassCount,
    SensitivityResult,
    Suggestion,
    evaluate_gate,
)

HOSTILE = "model.layers.0.norm\x1b[2J\n::error::x ##[group]"
KL = 0.012345678901234
M1 = Metrics(KL, 0.02, 0.995, 1.0, 0.5, 1e-4, 10.123456789, 400, 4)
M2 = Metrics(1e-6, 2e-6, 1.0, 1.0, 1e-3, 1e-9, 10.0, 400, 4)


def _result(gate: tuple[float | None, float | None] | None = None) -> SensitivityResult:
    rows = (
        NormRow(HOSTILE, "input", 0.009, False, 0.75, 49.3, M1),
        NormRow("model.norm", "final", 0.003, True, 0.25, 1e6, None),  # a screening estimate
    )
    roles = (NormRow("input", "input", 0.009, False, 0.75, 49.3, M1),)
    changes = (
        ChangeResult(Change("eps=1e-4", None, "eps=1e-4", True), M1, rows, roles),
        ChangeResult(Change("eps=1e-6", None, "eps=1e-6", True), M2, (), ()),
    )
    norms = (
        NormInfo(HOSTILE, "LlamaRMSNorm", "rms", 1e-5, "input", 49.3, 0),
        NormInfo("model.norm", "LlamaRMSNorm", "rms", 1e-5, "final", 1e6, 30),
    )
    result = SensitivityResult(
        "tiny",
        "texts.txt",
        4,
        404,
        4,
        norms,
        changes,
        9.87654321,
        PassCount(5.0, 1.0, 7.0, 12.0, 30, 2),
        suggestions=(Suggestion("input", 1e-5, 1e-3, 1e-7, ((1e-3, 0.01, float("nan")),)),),
    )
    if gate is None:
        return result
    return dataclasses.replace(result, gate=evaluate_gate(result, *gate))


def test_no_gate_passes_every_check_as_a_note() -> None:
    report = SensitivityReporter().checks(_result())
    assert report.rules == SENSITIVITY_RULES
    assert [(c.rule, c.name, c.level) for c in report.checks] == [
        ("sensitivity/kl", "eps=1e-4", "note"),
        ("sensitivity/top1", "eps=1e-4", "note"),
        ("sensitivity/kl", "eps=1e-6", "note"),
        ("sensitivity/top1", "eps=1e-6", "note"),
    ]
    assert report.passed and report.verdict == "no gate"
    assert report.checks[0].numbers["kl"] == KL and report.checks[0].numbers["max_kl"] is None


@pytest.mark.parametrize(
    ("max_kl", "fails"),
    [
        (0.02, False),  # the larger position class (0.02) equal to the limit: passes
        (float(np.nextafter(0.02, 0.0)), True),  # one ulp below: fails, though shown as 0.02
        (0.05, False),
    ],
)
def test_kl_gate_on_unrounded_values(max_kl: float, fails: bool) -> None:
    report = SensitivityReporter().checks(_result((max_kl, None)))
    kl = report.checks[0]
    assert kl.passed is not fails and kl.level == ("error" if fails else "note")
    assert report.checks[2].passed  # the second change's KL is tiny
    assert report.passed is not fails
    assert kl.numbers["max_kl"] == max_kl
    assert kl.message.endswith(f"at position 0 (max {max_kl:.6g})")


def test_top1_gate_either_position_class() -> None:
    report = SensitivityReporter().checks(_result((None, 0.995)))
    assert [c.passed for c in report.checks if c.rule == "sensitivity/top1"] == [True, True]
    strict = SensitivityReporter().checks(_result((None, 0.996)))
    assert [c.name for c in strict.failed] == ["eps=1e-4"]  # 0.995 < 0.996
    why = "eps=1e-4: top-1 at positions >= 1 0.995 < --min-top1 0.996"
    assert strict.verdict == f"1 of 2 change(s) exceed the gate: {why}"
    assert dict(strict.facts)["verdict"] == f"FAIL: 1 of 2 change(s) exceed the gate: {why}"


def test_document_is_valid_and_keeps_values_exact() -> None:
    doc = SensitivityReporter().document(_result((0.05, 0.9)))
    jsonschema.Draft202012Validator(load_schema("sensitivity")).validate(doc)
    json.dumps(doc, allow_nan=False)
    first, second = doc["changes"]
    assert (first["name"], first["kl"], first["perplexity"]) == ("eps=1e-4", KL, 10.123456789)
    assert first["per_norm"][0]["name"] == HOSTILE
    estimated = first["per_norm"][1]
    assert estimated["estimated"] is True and estimated["kl"] == 0.003
    assert estimated["top1_agreement"] is None  # no measured metrics for an estimate
    assert second["per_norm"] == []
    assert doc["suggestions"][0]["points"] == [{"eps": 1e-3, "kl": 0.01, "kl_first": "nan"}]
    assert doc["gate"] == {
        "max_kl": 0.05,
        "min_top1": 0.9,
        "passed": True,
        "failures": [],
        "reason": "2 change(s) within the gate",
    }
    assert (
        doc["passes"]["equivalent"] == 7.0
        and SensitivityReporter().document(_result())["gate"] is None
    )


def test_text_tables_estimates_and_escapes() -> None:
    result = _result((0.01, None))
    out = SensitivityReporter(RenderOptions()).text(result)
    lines = out.splitlines()
    assert lines[0] == "tiny: 2 norm(s), 4 text(s), 404 tokens (4 at position 0)"
    assert lines[1] == "base perplexity 9.87654"
    head = next(i for i, line in enumerate(lines) if line.startswith("change in every norm"))
    table = lines[head : head + 4]
    kl, kl0, top1, top10, dz, nmse, ppl = (
        "0.01235",
        "0.02",
        "99.50%",
        "100.00%",
        "0.5",
        "0.0001",
        "10.1235",
    )
    assert table[2].split() == ["eps=1e-4", kl, kl0, top1, top10, dz, nmse, ppl]
    # aligned: every right-aligned column ends at the same offset as its header
    assert len({len(row) for row in table[1:]}) == 1
    assert "eps=1e-4: each norm alone (1 estimated, marked ~)" in lines
    est = next(line for line in lines if line.startswith("model.norm"))
    assert est.split()[:3] == ["model.norm", "final", "~0.003"]
    assert "model.layers.0.norm\\x1b[2J\\x0a\\x3a:error\\x3a:x \\x23#[group]" in out
    assert "\x1b" not in out and "##[" not in out
    assert lines[-2].startswith("cost: 5 forward + 1 backward passes = 7 forward-equivalent")
    assert lines[-1] == (
        "FAIL: 1 of 2 change(s) exceed the gate: eps=1e-4: KL at positions >= 1 0.01235 > "
        "--max-kl 0.01, KL at position 0 0.02 > --max-kl 0.01"
    )


def test_a_limit_beyond_the_sweep_is_marked_not_found() -> None:
    found = _result()
    beyond = dataclasses.replace(
        found,
        suggestions=(
            dataclasses.replace(found.suggestions[0], largest_beyond=True, smallest_beyond=False),
        ),
    )
    text = SensitivityReporter().text(beyond)
    row = [ln.split() for ln in text.splitlines() if ln.startswith("input ")][-1]
    assert row == ["input", "1e-05", "1e-07", ">=0.001"]
    assert "the limit lies beyond the sweep" in text
    assert "beyond the sweep" not in SensitivityReporter().text(found)
    doc = SensitivityReporter().document(beyond)
    assert doc["suggestions"][0]["largest_beyond_sweep"] is True
    assert doc["suggestions"][0]["smallest_beyond_sweep"] is False


def test_the_text_fits_80_columns_by_rule_and_is_full_off_a_terminal() -> None:
    from rmsnorm_eps.reports.options import RenderOptions
    from rmsnorm_eps.sensitivity.result import ScreenCheck, Timing

    long = "model.language_model.layers.17.self_attn.post_feedforward_layernorm"
    base = _result((0.001, 0.9))
    change = base.changes[0]
    rows = (dataclasses.replace(change.per_norm[0], name=long), *change.per_norm[1:])
    check = ScreenCheck(10, 15, 2.5e-11, 3.16, True, 20)
    timing = Timing(0.436, 6.73, 18.3, 2.12, 0.42, 4.07)
    result = dataclasses.replace(
        base,
        changes=(dataclasses.replace(change, per_norm=rows, screen=check), *base.changes[1:]),
        passes=dataclasses.replace(base.passes, timing=timing),
    )
    full = SensitivityReporter().text(result)
    assert max(len(ln) for ln in full.splitlines()) > 120  # off a terminal: every column
    assert "NMSE last" in full and long in full and "not shown" not in full
    narrow = SensitivityReporter(RenderOptions(width=80)).text(result)
    assert max(len(ln) for ln in narrow.splitlines()) <= 80
    # dropped by the stated order, and said so; the KL and the name's ends stay
    heads = [ln for ln in narrow.splitlines() if ln.startswith("norm ")]
    assert heads and "NMSE last" not in heads[0] and "KL (pos>=1)" in heads[0]
    assert "(to fit 80 columns, not shown: NMSE last, top-1 pos 0" in narrow
    assert "post_feedforward_layernorm" in narrow or "…" in narrow
    assert "0.01235" in narrow and "FAIL: 1 of 2 change(s) exceed the gate" in narrow
    # the numbers of JSON do not depend on the width
    wide_doc = SensitivityReporter().document(result)
    assert SensitivityReporter(RenderOptions(width=80)).document(result) == wide_doc

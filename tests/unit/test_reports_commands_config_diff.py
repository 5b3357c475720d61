"""reports/commands/config_diff.py: config A against config B, one check per (pattern,
setting): eps compared within the relative tolerance (on unrounded values, either side of
it), significant settings failing as errors, the others as warnings; the document and the
text state each difference once, with where each value came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmsnorm_eps.config import diff_configs, load_config
from rmsnorm_eps.config.model import FIELDS
from rmsnorm_eps.config.resolve import ConfigDiff
from rmsnorm_eps.reports.commands.config_diff import (
    ConfigDiffReporter,
    diff_line,
)
from rmsnorm_eps.reports.options import RenderOptions

REL_TOL = 1e-6


def _config(directory: Path, name: str, eps: float, norm_eps: float, dim: int) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(
        f"schema_version: 1\nmodel: {name}\n"
        f"defaults: {{eps: {eps!r}, placement: inside, gain: w, dim: {dim}, norm: rms}}\n"
        f'layers:\n  "*.input_layernorm": {{}}\n  "model.norm": {{eps: {norm_eps!r}}}\n',
        "utf-8",
    )
    return path


def _diff(tmp_path: Path, b_eps: float, b_norm_eps: float = 1e-6, b_dim: int = 64) -> ConfigDiff:
    a = load_config(_config(tmp_path, "a", 1e-5, 1e-6, 64))
    b = load_config(_config(tmp_path, "b", b_eps, b_norm_eps, b_dim))
    return diff_configs(a, b, REL_TOL)


@pytest.mark.parametrize(
    ("factor", "equal"),
    [(1 + 0.5 * REL_TOL, True), (1 + 2 * REL_TOL, False)],
)
def test_eps_within_the_relative_tolerance_passes(
    tmp_path: Path, factor: float, equal: bool
) -> None:
    b_eps = 1e-5 * factor
    assert (abs(b_eps - 1e-5) <= REL_TOL * max(b_eps, 1e-5)) is equal  # the rule, by hand
    report = ConfigDiffReporter().checks(_diff(tmp_path, b_eps))
    eps_checks = [c for c in report.checks if c.rule == "config/eps"]
    assert [(c.name, c.passed) for c in eps_checks] == [
        ("*.input_layernorm", equal),
        ("model.norm", True),  # 1e-6 on both sides
    ]
    assert eps_checks[0].numbers == {"a": 1e-5, "b": b_eps, "rel_tol": REL_TOL}
    assert report.passed is equal
    assert repr(b_eps) in eps_checks[0].message  # shown unrounded, whichever side it falls


def test_one_check_per_pattern_and_setting_with_levels(tmp_path: Path) -> None:
    diff = _diff(tmp_path, 1e-5, b_norm_eps=2e-6, b_dim=32)
    report = ConfigDiffReporter().checks(diff)
    assert len(report.checks) == len(diff.patterns) * len(FIELDS) == 2 * len(FIELDS)
    assert [(c.rule, c.name, c.level) for c in report.failed] == [
        ("config/dim", "*.input_layernorm", "warning"),
        ("config/eps", "model.norm", "error"),
        ("config/dim", "model.norm", "warning"),
    ]
    assert not report.passed
    assert report.verdict == "1 difference(s) in eps, placement, gain or norm type (1 note(s))"
    assert report.source == diff.b.path and report.subject == "norm pattern"
    rule_levels = {r.id: r.level for r in report.rules}
    assert rule_levels["config/eps"] == "error" and rule_levels["config/dim"] == "warning"
    dim = report.failed[0]
    assert dim.numbers == {"a": 64, "b": 32}


def test_text_one_line_per_difference_and_verdict(tmp_path: Path) -> None:
    diff = _diff(tmp_path, 1e-5, b_norm_eps=2e-6, b_dim=32)
    out = ConfigDiffReporter(RenderOptions()).text(diff)
    lines = out.splitlines()
    assert lines[0] == f"A: {diff.a.path} (yaml, a)"
    assert lines[2] == "compared 2 layer pattern(s); eps within relative tolerance 1e-06"
    assert lines[3:5] == [
        'DIFF eps [model.norm]: differ beyond relative tolerance: A 1e-06 (layers["model.norm"]'
        '.eps) vs B 2e-06 (layers["model.norm"].eps)',
        "note dim [*.input_layernorm, model.norm]: differ: A 64 (defaults.dim) vs B 32 "
        "(defaults.dim)",
    ]
    assert lines[-1] == "DIFFERENT: 1 difference(s) in eps, placement, gain or norm type"
    same = ConfigDiffReporter(RenderOptions()).text(_diff(tmp_path, 1e-5))
    assert same.splitlines()[-1] == "EQUIVALENT: eps, placement, gain and norm type agree"


def test_document_lists_each_difference_with_its_line(tmp_path: Path) -> None:
    diff = _diff(tmp_path, 1e-5, b_norm_eps=2e-6, b_dim=32)
    doc = ConfigDiffReporter().document(diff)
    assert (doc["command"], doc["equivalent"], doc["rel_tol"]) == ("config diff", False, REL_TOL)
    assert doc["patterns"] == ["*.input_layernorm", "model.norm"]
    eps, dim = doc["differences"]
    assert (eps["field"], eps["significant"], eps["patterns"]) == ("eps", True, ["model.norm"])
    assert (eps["a"]["value"], eps["b"]["value"]) == (1e-6, 2e-6)
    assert eps["message"] == diff_line(diff.differences[0], diff.a.path, diff.b.path)
    assert (dim["field"], dim["significant"]) == ("dim", False)


def test_a_value_missing_on_one_side_cannot_be_compared(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    common = "schema_version: 1\ndefaults: {eps: 1e-5, placement: inside, gain: w"
    a.write_text(common + ", norm: rms}\n", "utf-8")
    b = tmp_path / "b.yaml"
    b.write_text(common + "}\n", "utf-8")
    diff = diff_configs(load_config(a), load_config(b))
    (norm,) = [d for d in diff.differences if d.field == "norm"]
    assert diff_line(norm).startswith("DIFF norm [")
    assert "cannot compare: A rms" in diff_line(norm) and "vs B missing" in diff_line(norm)
    report = ConfigDiffReporter().checks(diff)
    assert [c.rule for c in report.failed if c.level == "error"] == ["config/norm"]

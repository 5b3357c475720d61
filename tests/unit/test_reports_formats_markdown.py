"""reports/formats/markdown.py: the verdict heading, the facts, the counts, one table row per
failed check, the passing checks folded, the rules; cells escaped so a hostile name can
neither add a column, nor open an HTML tag, nor break out of its code span."""

from __future__ import annotations

import re
from pathlib import Path

from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.escape import markdown as cell
from rmsnorm_eps.reports import check_report
from rmsnorm_eps.reports.checks import CheckReport
from rmsnorm_eps.reports.formats.markdown import code, render_checks
from tests.unit.report_cases import RATIO_EPS, hostile_report, write_ratio_dump

#: A pipe that separates cells: not preceded by an odd run of backslashes.
_SEP = re.compile(r"(?<!\\)(?:\\\\)*\|")


def _columns(row: str) -> int:
    return len(_SEP.findall(row)) - 1


def test_cell_and_code_by_hand() -> None:
    assert cell("a|b\\c") == "a\\|b\\\\c"
    assert cell("<b>x</b> &amp; &#1; a <= b & c") == "&lt;b>x&lt;/b> &amp;amp; &amp;#1; a <= b & c"
    assert cell("x\ny::z##w") == "x\\\\x0ay\\\\x3a:z\\\\x23#w"
    assert code("plain") == "`plain`"
    assert code("a`b") == "`` a`b ``"
    assert code("``x`") == "``` ``x` ```"


def test_hostile_report_tables_keep_their_columns() -> None:
    out = render_checks(hostile_report())
    lines = out.splitlines()
    assert lines[0].startswith("### FAIL: rmsnorm-eps demo: ")
    rows = [line for line in lines if line.startswith("|")]
    assert rows, out
    widths = {line: _columns(line) for line in rows}
    facts = [r for r in rows if r.startswith("| source") or r.startswith("| verdict")]
    assert all(widths[r] == 2 for r in facts)
    failed = [r for r in rows if r.startswith("| error") or r.startswith("| warning")]
    assert len(failed) == 2 and all(widths[r] == 4 for r in failed)
    assert "<b>" not in out and "</testcase>" not in out and "&amp;amp;" in out
    assert "\x1b" not in out and "\u202e" not in out
    assert "##[" not in out and "##vso[" not in out  # (the heading's ### is the report's own)
    assert not any(line.lstrip().startswith("::") for line in lines)
    # heading 2, facts 5, counts 2, failures 5, passing 10, rules 5 lines: the newline in
    # the name and message added none
    assert len(out.split("\n")) == 2 + 5 + 2 + 5 + 10 + 5


def test_counts_failed_first_passing_folded_and_rules() -> None:
    out = render_checks(hostile_report())
    assert "4 check(s): 2 passed, 2 failed (1 error(s), 1 warning(s))." in out
    assert out.index("| level | layer | check | details |") < out.index("<details>")
    assert "<summary>2 passing check(s)</summary>" in out
    assert "| `plain` | bound | plain: fine |" in out
    assert "- **bound** (`demo/bound`): q/eps below the bound" in out
    assert "- **nan** (`demo/nan`): NaN values" in out
    passing = out[out.index("<details>") : out.index("</details>")]
    assert passing.count("\n| `") == 2  # the two notes, not the failures


def test_passing_report_and_empty_report() -> None:
    ok = hostile_report(passed=True)
    assert render_checks(ok).startswith("### PASS: ")
    empty = render_checks(CheckReport("demo", "nothing", None, "layer", (), (), True, "ok"))
    assert empty == "### PASS: nothing\n"


def test_ratio_dump_failed_rows_are_the_violating_layers(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    out = render_checks(check_report(rep, evaluate_gate(rep)))
    failed = [line for line in out.splitlines() if line.startswith("| error |")]
    assert [line.split(" | ")[1] for line in failed[:2]] == ["`bad`", "`nan`"]
    assert len(failed) == 3
    assert "8 check(s): 5 passed, 3 failed (3 error(s), 0 warning(s))." in out
    assert "| violations | 4 (3 below the bound, 1 nonfinite) in 3 layer(s) |" in out

"""reports/commands/_layers.py: what ratio, merge and compare reports share, seen through
their text and documents: the members line and document (layers and companions counted
apart), the first-token / other-tokens table, the skipped layers and the verdict line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.reports.commands import compare, ratio
from rmsnorm_eps.reports.commands._layers import members_document
from rmsnorm_eps.reports.options import RenderOptions

EPS = 1e-6
#: two sequences of three tokens; q/eps at position 0: 1e-3, 2e-3; elsewhere 1e6 but one 1e-2
Q = np.array([[1e-9, 1.0, 1.0], [2e-9, 1.0, 1e-8]], np.float64)
POSITIONS = np.array([[0, 1, 2], [0, 1, 2]], np.int64)


def _positions_dump(tmp_path: Path) -> Path:
    path = tmp_path / "p.npz"
    np.savez(path, L=Q, **{"L::position": POSITIONS})  # type: ignore[arg-type]
    return path


def _split_row(out: str, name: str) -> list[str]:
    """The cells of ``name``'s row in the table after the "By token position" line."""
    after = out[out.index("By token position") :]
    return next(line.split() for line in after.splitlines() if line.split()[:1] == [name])


def test_members_document_and_line_count_companions_apart(tmp_path: Path) -> None:
    rep = analyze_dump(_positions_dump(tmp_path), EPS)
    assert members_document(rep) == {"members": {"total": 2, "analysed": 2}}
    assert ratio.RatioReporter().document(rep)["summary"]["members"] == {"total": 2, "analysed": 2}
    out = ratio.RatioReporter(RenderOptions()).text(rep)
    assert "Members: 1 layer (+1 companion) in the file, 1 analysed" in out.splitlines()


def test_members_line_without_companions_and_none_for_one_array(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, a=np.array([1.0]), b=np.array([1.0]), c=np.array([-1.0]))
    rep = analyze_dump(path, EPS, skip_unreadable=True)
    assert (rep.members_total, rep.members_analysed) == (3, 2)
    assert (
        "Members: 3 in the file, 2 analysed"
        in ratio.RatioReporter(RenderOptions()).text(rep).splitlines()
    )
    one = tmp_path / "q.npy"
    np.save(one, np.array([1.0]), allow_pickle=False)
    single = analyze_dump(one, EPS)
    assert "Members:" not in ratio.RatioReporter(RenderOptions()).text(single)
    merged = replace(rep, shards=("a.json", "b.json"))  # a merge has no file of its own
    assert members_document(merged) == {}
    assert "Members:" not in ratio.RatioReporter(RenderOptions()).text(merged)


def test_position_split_table_of_ratio(tmp_path: Path) -> None:
    rep = analyze_dump(_positions_dump(tmp_path), EPS)
    out = ratio.RatioReporter(RenderOptions()).text(rep)
    assert "By token position: first token (position 0) | other tokens" in out
    first, other = Q[POSITIONS == 0], Q[POSITIONS != 0]
    bound = rep.min_ratio
    expected = [
        str(first.size),
        f"{first.min() / EPS:.4g}",
        f"{first.max():.4g}",
        str(int(np.sum(first / EPS < bound))),
        str(other.size),
        f"{other.min() / EPS:.4g}",
        f"{other.max():.4g}",
        str(int(np.sum(other / EPS < bound))),
    ]
    assert expected == ["2", "0.001", "2e-09", "2", "4", "0.01", "1", "1"]
    assert _split_row(out, "L")[1:] == expected
    without = tmp_path / "plain.npz"
    np.savez(without, L=Q)
    assert "By token position" not in ratio.RatioReporter(RenderOptions()).text(
        analyze_dump(without, EPS)
    )


def test_position_split_table_of_compare(tmp_path: Path) -> None:
    rep = compare_dump(_positions_dump(tmp_path), "eps=1e-6", "eps=1e-5")
    out = compare.CompareReporter(RenderOptions()).text(rep)
    assert "By token position: first token (position 0) | other tokens" in out
    first, other = Q[POSITIONS == 0], Q[POSITIONS != 0]

    def moved(q: np.ndarray) -> int:
        return int(np.sum(np.abs(np.sqrt((q + 1e-6) / (q + 1e-5)) - 1.0) > 0.01))

    cells = _split_row(out, "L")
    assert cells[1] == str(first.size) and cells[3] == str(moved(first))
    assert cells[5] == str(other.size) and cells[7] == str(moved(other))


def test_tail_skipped_lines_then_the_verdict(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, a=np.array([1e-9]), bad=np.array([-2.0]))
    rep = analyze_dump(path, EPS, skip_unreadable=True)
    gate = evaluate_gate(rep)
    lines = ratio.RatioReporter(RenderOptions(gate=gate)).text(rep).splitlines()
    assert lines[-2].startswith("SKIPPED (unreadable, not analysed): bad: negative q -2.0")
    assert lines[-1] == "INCOMPLETE (1 layer(s) skipped): FAIL: 1 violation(s), none allowed"
    no_gate = ratio.RatioReporter(RenderOptions()).text(rep).splitlines()
    assert no_gate[-1].startswith("SKIPPED")  # no gate: no verdict line
    clean = analyze_dump(path, EPS, min_ratio=1e-4, skip_unreadable=True)
    done = replace(clean, skipped=())
    assert ratio.RatioReporter(RenderOptions(gate=evaluate_gate(done))).text(done).splitlines()[
        -1
    ] == ("PASS: no violations")


def test_tail_escapes_skipped_names(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, a=np.array([1.0]), **{"x\x1b[2J\n##[error]": np.array([-1.0])})  # type: ignore[arg-type]
    rep = analyze_dump(path, EPS, skip_unreadable=True)
    out = ratio.RatioReporter(RenderOptions(gate=evaluate_gate(rep))).text(rep)
    assert "SKIPPED (unreadable, not analysed): x\\x1b[2J\\x0a\\x23#[error]: " in out
    assert "\x1b" not in out and "##[" not in out

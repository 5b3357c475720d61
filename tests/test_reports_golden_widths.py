"""The text report of every golden case (tests/helpers.GOLDEN_CASES) on a terminal of 60, 80,
100 and 200 columns, without and with colour, and in colour with no width: byte for byte what
tests/golden/widths/ holds. Those files were written by the two-renderer text format (plain
writer, rich where it deferred) before the one text writer replaced it: this is the proof that
the replacement changed no byte without colour. In colour, two changes are named in the
CHANGELOG (a table whose last space alone passes the width is a table, as without colour; the
codes around an empty cell are grouped differently), so the colour files were written again by
the one writer, and every one of them is checked to be, codes removed, the plain text.

Regenerate after an intended change with ``RMSNORM_EPS_REGEN_GOLDEN=1 python -m pytest
tests/test_reports_golden_widths.py`` and review the diff (docs/DEVELOPING.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.cli import _output
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.spec import parse_spec
from rmsnorm_eps.merge.combine import merge_reports
from rmsnorm_eps.reports import RenderOptions, render
from tests.helpers import GOLDEN_CASES as CASES

ROOT = Path(__file__).resolve().parents[1]
REGEN = os.environ.get("RMSNORM_EPS_REGEN_GOLDEN", "") not in ("", "0")
WIDTHS = Path(__file__).resolve().parent / "golden" / "widths"
#: (width, colour): every terminal width the reports are checked at, and colour in a file.
LAYOUTS = [(w, c) for c in (False, True) for w in (60, 80, 100, 200)] + [(None, True)]


#: Long names that share a prefix and differ in the middle: the fitting rule's cases.
LONG = tuple(
    f"model.language_model.layers.{i}.{k}"
    for i in (3, 12, 13)
    for k in ("self_attn.q_norm", "input_layernorm", "post_attention_layernorm")
)


_CODE = re.compile(r"\x1b\[[0-9;]*m")


def _check(result: object, options: RenderOptions, stem: str) -> None:
    for width, color in LAYOUTS:
        text = render(result, "text", replace(options, width=width, color=color))
        path = WIDTHS / _name(stem, width, color)
        if REGEN:
            path.write_text(text, encoding="utf-8")
        assert path.is_file(), f"missing {path}; run with RMSNORM_EPS_REGEN_GOLDEN=1"
        assert text == path.read_text(encoding="utf-8"), path.name
        if color:
            plain = render(result, "text", replace(options, width=width, color=False))
            bare = "".join(x.rstrip(" ") + "\n" for x in _CODE.sub("", text).splitlines())
            assert bare == plain, path.name


def _name(case: str, width: int | None, color: bool) -> str:
    return f"{case}.{'any' if width is None else width}{'.color' if color else ''}.txt"


@pytest.mark.parametrize("case", sorted(CASES))
def test_text_at_every_width(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.chdir(ROOT)
    for var in ("RMSNORM_EPS_FORMAT", "GITHUB_STEP_SUMMARY", "NO_COLOR", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    seen: list[tuple[object, RenderOptions]] = []
    keep = _output.render_or_usage_error

    def spy(result: object, fmt: str, options: RenderOptions) -> str:
        seen.append((result, options))
        return keep(result, fmt, options)

    monkeypatch.setattr(_output, "render_or_usage_error", spy)
    args, code = CASES[case]
    assert cli(*args, "--format", "text").exit_code == code
    assert len(seen) == 1
    _check(*seen[0], case)


def _dump(name: str, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    arrays = {n: rng.lognormal(-4.0, 2.0, size=(4, 16)).astype(np.float64) for n in LONG}
    np.savez(name, **arrays)  # type: ignore[arg-type]
    return Path(name)


def _long(case: str) -> tuple[object, RenderOptions]:
    if case == "ratio":
        rep: object = analyze_dump(_dump("a.npz", 0), 1e-5, top_k=2)
    elif case == "merge":
        rep = merge_reports([analyze_dump(_dump(f"{i}.npz", i), 1e-5, top_k=2) for i in (1, 2)])
    else:
        spec_from, spec_to = parse_spec("eps=1e-6", "--from"), parse_spec("eps=1e-5", "--to")
        rep = compare_dump(_dump("c.npz", 3), spec_from, spec_to, top_k=2)
    return rep, RenderOptions(gate=evaluate_gate(rep, None, None))  # type: ignore[arg-type]


@pytest.mark.parametrize("case", ["ratio", "merge", "compare"])
def test_long_names_at_every_width(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str
) -> None:
    monkeypatch.chdir(tmp_path)  # the dump's name in the report is "a.npz", not a tmp path
    _check(*_long(case), f"long-{case}")

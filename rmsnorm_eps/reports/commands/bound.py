"""``bound`` reports: the bound for a delta (all six formats; the check report holds facts
only), and A at given ratios (``--ratio``/``--table``/``--ratios``: text, json, and a markdown
table; it checks nothing, so the other CI formats refuse it).

Imports nothing heavy at module level: ``bound`` must start fast (no numpy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmsnorm_eps.bound import BoundResult, RatioFigures
from rmsnorm_eps.jsonvalues import head, jnum
from rmsnorm_eps.reports.checks import CheckReport
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.interface import (
    ChecksRole,
    DocumentRole,
    MarkdownRole,
    Reporter,
    TextRole,
)
from rmsnorm_eps.reports.options import UnsupportedResult

if TYPE_CHECKING:
    from rmsnorm_eps.reports.blocks import Block

__all__ = ["BoundReporter"]


def _figures(result: object) -> tuple[RatioFigures, ...] | None:
    if isinstance(result, tuple) and all(isinstance(r, RatioFigures) for r in result):
        return result
    return None


def _bound_parts(result: BoundResult) -> list[Block]:
    from rmsnorm_eps.reports.blocks import Table, Text

    table = Table(show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for row in _bound_rows(result):
        table.add_row(*row)
    return [Text(_BOUND_TITLE), table]


_RATIOS_TITLE = "Attenuation A = sqrt(r/(r+1)) at r = q/eps"
_BOUND_TITLE = "Attenuation bound: A = sqrt(q/(q+eps)) >= 1 - delta"


def _ratio_table(rows: tuple[RatioFigures, ...]) -> tuple[list[str], list[list[str]]]:
    """The headers and cells of the A-at-ratios table (a q column when eps was given)."""
    with_q = any(r.q is not None for r in rows)
    heads = ["q/eps"] + (["q"] if with_q else []) + ["A", "1 - A"]
    body = [
        [_g(r.ratio)] + ([_g(r.q)] if with_q else []) + [f"{r.attenuation:.6f}", _g(r.loss)]
        for r in rows
    ]
    return heads, body


def _ratio_figures_parts(rows: tuple[RatioFigures, ...]) -> list[Block]:
    from rmsnorm_eps.reports.blocks import Table, Text

    heads, body = _ratio_table(rows)
    table = Table()
    for name in heads:
        table.add_column(name, justify="right")
    for cells in body:
        table.add_row(*cells)
    return [Text(_RATIOS_TITLE), table]


def _bound_rows(result: BoundResult, short: bool = False) -> list[tuple[str, str]]:
    """The bound's figures, labelled for the text table (or ``short``: the check facts)."""
    rows: list[tuple[str, float | None]] = [
        ("delta" if short else "delta (tolerated attenuation loss)", result.delta),
        ("A must be >=", 1.0 - result.delta),
        ("min q/eps", result.min_ratio),
    ]
    if result.eps is not None:
        rows += [
            ("eps", result.eps),
            ("min q" if short else "min q (mean square)", result.min_q),
            ("min input RMS" if short else "min input RMS sqrt(q)", result.min_rms),
        ]
    return [(label, _g(value, 12)) for label, value in rows]


def _ratio_figures(rows: tuple[RatioFigures, ...]) -> str:
    head, _ = _ratio_table(rows)
    with_q = "q" in head
    lines = [
        f"### {_RATIOS_TITLE}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    for r in rows:
        cells = (
            [f"{r.ratio:.6g}"]
            + ([f"{r.q:.6g}" if r.q is not None else "-"] if with_q else [])
            + [f"{r.attenuation:.6f}", f"{r.loss:.6g}"]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


Bound = BoundResult | tuple[RatioFigures, ...]


class BoundReporter(
    Reporter, TextRole[Bound], DocumentRole[Bound], MarkdownRole[Bound], ChecksRole[Bound]
):
    """``bound``: the bound for a delta in every format; A at given ratios in text, json and a
    Markdown table (it has no check report)."""

    def text(self, result: Bound) -> str:
        """The text report."""
        from rmsnorm_eps.reports.formats.text import render_blocks

        rows = _figures(result)
        if rows is not None:
            return render_blocks(_ratio_figures_parts(rows), self.options)
        assert isinstance(result, BoundResult)
        return render_blocks(_bound_parts(result), self.options)

    def document(self, result: Bound) -> dict[str, object]:
        """The bound document, or the ``ratios`` document for A at given ratios."""
        doc = head("bound")
        rows = _figures(result)
        if rows is not None:
            doc["ratios"] = [
                {
                    "ratio": jnum(r.ratio),
                    "attenuation": r.attenuation,
                    "loss": r.loss,
                    "eps": r.eps,
                    "q": jnum(r.q),
                }
                for r in rows
            ]
            return doc
        assert isinstance(result, BoundResult)
        doc.update(
            {
                "delta": result.delta,
                "min_ratio": result.min_ratio,
                "eps": result.eps,
                "min_q": result.min_q,
                "min_rms": result.min_rms,
            }
        )
        return doc

    def markdown(self, result: Bound) -> str:
        """A table of A at the given ratios, or the bound's check report."""
        from rmsnorm_eps.reports.formats.markdown import render_checks

        rows = _figures(result)
        if rows:
            return _ratio_figures(rows)
        return render_checks(self.checks(result))

    def checks(self, result: Bound) -> CheckReport:
        """``bound`` checks nothing: a report of facts only (no checks, always passing). A at
        given ratios has no check report."""
        if not isinstance(result, BoundResult):
            raise UnsupportedResult("A at given ratios has no check report (text, json, markdown)")
        facts = _bound_rows(result, short=True)
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

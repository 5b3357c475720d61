"""Pieces of the text report that the layer-by-layer commands (ratio, merge, compare) share:
the first-token / other-tokens table and the tail (skipped layers, verdict)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from rmsnorm_eps.escape import text as _e
from rmsnorm_eps.reports.formats.text import RowTable
from rmsnorm_eps.reports.options import RenderOptions

__all__ = ["position_split_parts", "tail_parts"]


def position_split_parts(
    layers: Sequence[Any], columns: Sequence[tuple[str, Callable[[Any], str]]]
) -> list[Any]:
    """For dumps with token positions: each layer's first token (position 0) next to its other
    tokens, one ``(header, cell)`` column pair per figure. The table's rows are made from
    ``layers`` on each pass over them (:class:`RowTable`), never held."""
    if not any(ly.first_token is not None for ly in layers):
        return []
    heads: list[tuple[str, str, bool]] = [("layer", "left", False)]
    for side in ("first", "other"):
        heads += [(f"{side}\n{name}", "right", True) for name, _ in columns]

    def rows() -> Iterator[tuple[list[str], None]]:
        for ly in layers:
            if ly.first_token is None:
                continue
            cells = [_e(ly.name)]
            for part in (ly.first_token, ly.other_tokens):
                cells += [cell(part) for _, cell in columns]
            yield cells, None

    return [
        Text("By token position: first token (position 0) | other tokens"),
        RowTable(tuple(heads), rows),
    ]


def tail_parts(skipped: tuple[Any, ...], options: RenderOptions) -> Iterator[RenderableType]:
    """One line per layer skipped as unreadable, then the verdict when the command gates
    (``INCOMPLETE`` when a layer was skipped: part of the dump was not checked); each line is
    made when it is taken."""
    for u in skipped:
        yield Text(f"SKIPPED (unreadable, not analysed): {_e(u.name)}: {_e(u.problem)}")
    if options.gate is not None:
        verdict = "PASS: " if options.gate.passed else "FAIL: "
        if skipped:
            verdict = f"INCOMPLETE ({len(skipped)} layer(s) skipped): " + verdict
        yield Text(verdict + options.gate.reason)


def members_document(report: Any) -> dict[str, Any]:
    """``{"members": {"total", "analysed"}}`` of a dump's report: every entry of the file is
    either analysed or listed as skipped (a merged report has no file: nothing)."""
    if getattr(report, "shards", None) or not report.members_total:
        return {}
    return {"members": {"total": report.members_total, "analysed": report.members_analysed}}


def members_parts(report: Any) -> list[RenderableType]:
    """One line saying how many entries the dump's file holds and how many were analysed
    (for a container of several entries, or when one was not analysed)."""
    total, analysed = report.members_total, report.members_analysed
    if getattr(report, "shards", None) or not (total > 1 or analysed < total):
        return []
    return [Text(f"Members: {total} in the file, {analysed} analysed")]

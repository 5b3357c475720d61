"""Pieces of the text report that the layer-by-layer commands (ratio, merge, compare) share:
the first-token / other-tokens table and the tail (skipped layers, verdict)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.reports.blocks import Block, NamedTable, Table, Text
from rmsnorm_eps.reports.options import RenderOptions

__all__ = ["position_split_parts", "tail_parts"]

#: A member ``<layer>::<what>`` is a companion of its layer (as ``sources.npz.COMPANION_SEP``).
_COMPANION_SEP = "::"


def position_split_parts(
    layers: Sequence[Any], columns: Sequence[tuple[str, Callable[[Any], str]]]
) -> list[Block]:
    """For dumps with token positions: each layer's first token (position 0) next to its other
    tokens, one ``(header, cell)`` column pair per figure."""
    split = [ly for ly in layers if ly.first_token is not None]
    if not split:
        return []
    table = Table()
    table.add_column("layer")
    for side in ("first", "other"):
        for name, _ in columns:
            table.add_column(f"{side}\n{name}", justify="right")
    for ly in split:
        cells = [Text(_e(ly.name))]
        for part in (ly.first_token, ly.other_tokens):
            cells += [Text(cell(part)) for _, cell in columns]
        table.add_row(*cells)
    return [Text("By token position: first token (position 0) | other tokens"), NamedTable(table)]


def tail_parts(skipped: tuple[Any, ...], options: RenderOptions) -> list[Block]:
    """One line per layer skipped as unreadable, then the verdict when the command gates
    (``INCOMPLETE`` when a layer was skipped: part of the dump was not checked)."""
    parts: list[Block] = [
        Text(f"SKIPPED (unreadable, not analysed): {_e(u.name)}: {_e(u.problem)}") for u in skipped
    ]
    if options.gate is not None:
        verdict = "PASS: " if options.gate.passed else "FAIL: "
        if skipped:
            verdict = f"INCOMPLETE ({len(skipped)} layer(s) skipped): " + verdict
        parts.append(Text(verdict + options.gate.reason))
    return parts


def members_document(report: Any) -> dict[str, Any]:
    """``{"members": {"total", "analysed"}}`` of a dump's report: every entry of the file is
    either analysed or listed as skipped (a merged report has no file: nothing)."""
    if getattr(report, "shards", None) or not report.members_total:
        return {}
    return {"members": {"total": report.members_total, "analysed": report.members_analysed}}


def members_parts(report: Any) -> list[Block]:
    """One line saying how many entries the dump's file holds and how many were analysed
    (for a container of several entries, or when one was not analysed). Layers and their
    companions (``<layer>::position``, ``::batch``, ...) are counted apart when there are
    companions: ``Members: 61 layers (+122 companions) in the file, 61 analysed`` (analysed
    layers); else ``Members: 4 in the file, 4 analysed``."""
    total, analysed = report.members_total, report.members_analysed
    if getattr(report, "shards", None) or not (total > 1 or analysed < total):
        return []
    layers = len(report.layers) + sum(_COMPANION_SEP not in u.name for u in report.skipped)
    companions = total - layers
    if companions <= 0:
        return [Text(f"Members: {total} in the file, {analysed} analysed")]
    return [
        Text(
            f"Members: {layers} layer{'s' * (layers != 1)} (+{companions} "
            f"companion{'s' * (companions != 1)}) in the file, "
            f"{len(report.layers)} analysed"
        )
    ]

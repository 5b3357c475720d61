"""The plain table writer, and the rule that fits a table of names to a narrow terminal.

:func:`table_lines` lays out a header-ruled table (the layout of every table in the text
reports: rich's ``box.SIMPLE_HEAD`` with ``pad_edge=False``) without rich, for any command::

    from rmsnorm_eps.reports.table import Column, table_lines
    lines = table_lines([Column("layer"), Column("min q/eps", "right")], rows)

Each column is as wide as its widest cell (in terminal cells: a CJK character takes two);
columns are separated by three spaces and the line has one space at each end; a header of
several lines sits at the bottom of the header row, ruled with ``─`` across the table. Lines
keep their trailing spaces (the text format strips them).

:func:`fit_names` is the fitting rule, written once (docs/reports.md, "Text reports at any
width"): (1) drop the prefix every name shares, up to a ``.`` or ``/`` (a ``NOUN under
PREFIX`` line says so); (2) if the table is still too wide, shorten each name in the middle
(``head…tail``, distinct names stay distinct) to what the other columns leave, when that is
at least :data:`MIN_NAME` cells. A table that still does not fit is shown one block per row
(``reports.formats.text``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len

__all__ = [
    "ELLIPSIS",
    "MIN_NAME",
    "Column",
    "Fitted",
    "cells",
    "common_prefix",
    "ellipsize",
    "fit_names",
    "justify",
    "shorten_names",
    "table_lines",
]

#: Marks the characters left out of a shortened name.
ELLIPSIS = "…"
#: Narrowest name column worth a table; below it the compact layout is used.
MIN_NAME = 16

Justify = Literal["left", "right", "center"]


@dataclass(frozen=True)
class Column:
    """A column: its header (``\\n`` between lines) and how its cells are aligned."""

    header: str
    justify: Justify = "left"


def cells(text: str) -> int:
    """Terminal cells of ``text`` (printable ASCII: its length)."""
    return len(text) if text.isascii() and text.isprintable() else cell_len(text)


def justify(text: str, width: int, how: Justify) -> str:
    """``text`` padded with spaces to ``width`` terminal cells, aligned by ``how``."""
    gap = width - cells(text)
    if how == "right":
        return " " * gap + text
    if how == "center":
        return " " * (gap // 2) + text + " " * (gap - gap // 2)
    return text + " " * gap


def table_lines(
    columns: Sequence[Column],
    rows: Iterable[Sequence[str]],
    title: str | None = None,
    show_header: bool = True,
) -> list[str]:
    """The table's lines: ``title``, a blank line, the header and its rule, the rows, a blank
    line (each line as wide as the table; cells on one line each)."""
    body = [list(r) for r in rows]
    heads = [c.header.split("\n") for c in columns]
    widths = [
        max([cells(r[i]) for r in body] + ([cells(h) for h in heads[i]] if show_header else []))
        for i in range(len(columns))
    ]
    hows = [c.justify for c in columns]

    def line(values: Sequence[str]) -> str:
        return " " + "   ".join(map(justify, values, widths, hows)) + " "

    inner = sum(widths) + 3 * (len(widths) - 1)
    out = [] if title is None else [title]
    out.append(" " * (inner + 2))
    if show_header:
        height = max(len(h) for h in heads)
        padded = [[""] * (height - len(h)) + h for h in heads]
        out += [line([p[k] for p in padded]) for k in range(height)]
        out.append(" " + "─" * inner + " ")
    out += [line(r) for r in body]
    out.append(" " * (inner + 2))
    return out


def common_prefix(names: Sequence[str]) -> str:
    """The longest prefix of every name in ``names`` (two or more distinct names) that ends
    with ``.`` or ``/`` and leaves something of each name; ``""`` when there is none."""
    distinct = sorted(set(names))
    if len(distinct) < 2:
        return ""
    first, last = distinct[0], distinct[-1]  # sorted: their common prefix is everyone's
    same = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), None)
    prefix = first[: len(first) if same is None else same]
    while prefix:
        cut = max(prefix.rfind("."), prefix.rfind("/")) + 1
        prefix = prefix[:cut]
        if prefix and all(len(n) > len(prefix) for n in distinct):
            return prefix
        prefix = prefix[:-1]
    return ""


def ellipsize(name: str, width: int, head: int | None = None) -> str:
    """``name`` if it takes at most ``width`` terminal cells, else its start (``head`` cells;
    default: half of what fits), :data:`ELLIPSIS`, and its end: at most ``width`` cells."""
    if cell_len(name) <= width:
        return name
    keep = max(width - 1, 0)
    h = keep // 2 if head is None else min(max(head, 0), keep)
    return _cells_from(name, h) + ELLIPSIS + _cells_from(name[::-1], keep - h)[::-1]


def _cells_from(name: str, n: int) -> str:
    """The longest start of ``name`` that takes at most ``n`` terminal cells."""
    out, used = [], 0
    for ch in name:
        used += cell_len(ch)
        if used > n:
            break
        out.append(ch)
    return "".join(out)


def shorten_names(names: Iterable[str], width: int) -> dict[str, str]:
    """Each distinct name -> what is shown for it: itself if it has at most ``width``
    terminal cells, else :func:`ellipsize` of it. Distinct names are shown distinct: when a
    shortening is already taken, the ellipsis moves, and if no place works, more is shown."""
    unique = list(dict.fromkeys(names))
    shown = {n: n for n in unique if cell_len(n) <= width}
    taken = set(shown.values())
    for name in unique:
        if name in shown:
            continue
        choice = name
        for w in range(max(width, 1), cell_len(name)):
            default = (w - 1) // 2
            heads = sorted(range(w), key=lambda h: (abs(h - default), h))
            found = next(
                (s for s in (ellipsize(name, w, h) for h in heads) if s not in taken), None
            )
            if found is not None:
                choice = found
                break
        shown[name] = choice
        taken.add(choice)
    return shown


@dataclass(frozen=True)
class Fitted:
    """What :func:`fit_names` decided: each name -> what is shown, the lines before the
    table (``NOUN under PREFIX``), and whether the table now fits."""

    shown: dict[str, str]
    lead: tuple[str, ...]
    fits: bool


def fit_names(
    names: Sequence[str],
    header: str,
    measure: Callable[[dict[str, str]], int],
    width: int,
    noun: str,
) -> Fitted:
    """Steps (1) and (2) of the fitting rule (module docstring) for a table whose name column
    holds ``names`` under ``header``; ``measure(shown)`` is the table's width with each name
    shown as ``shown`` says."""
    shown = {n: n for n in names}
    lead: tuple[str, ...] = ()
    prefix = common_prefix(names)
    if prefix:  # (1) drop the prefix every name shares
        lead = (f"{noun} under {ellipsize(prefix, width - len(noun) - 7)}",)
        shown = {n: n[len(prefix) :] for n in names}
        if measure(shown) <= width:
            return Fitted(shown, lead, True)
    # (2) shorten in the middle: the name column gets what the other columns leave
    name_width = max(cell_len(s) for s in [*shown.values(), header])
    budget = width - (measure(shown) - name_width)
    if budget >= MIN_NAME:
        short = shorten_names(shown.values(), budget)
        shown = {n: short[s] for n, s in shown.items()}
        return Fitted(shown, lead, measure(shown) <= width)
    return Fitted(shown, lead, False)

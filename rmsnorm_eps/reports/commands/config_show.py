"""``config show`` reports: a model's norm config as read from one file (defaults, then each
layer pattern with every matching entry applied, with provenance): document and text.

Values are unrounded in the document; the text shows eps with repr (shortest round trip) and,
for float32-stored eps, the nearest short decimal. It checks nothing (text and json only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import text as _e
from rmsnorm_eps.reports.document import head as _head
from rmsnorm_eps.reports.interface import DocumentRole, Reporter, TextRole
from rmsnorm_eps.reports.options import RenderOptions

if TYPE_CHECKING:
    from rmsnorm_eps.config.model import NormConfig, NormSettings, Resolved

__all__ = ["document", "show_value", "text", "value_document"]

#: Above this many layer patterns the layers table is written as plain aligned lines, not a
#: rich Table (rich lays out every cell of a 20,000-row table: tens of seconds). Smaller
#: configs keep the rich table unchanged.
PLAIN_ROWS = 1000
_COLUMNS = ("eps", "placement", "gain", "gain_baked", "dim", "norm")
_LAYERS_TITLE = "layers (defaults + every matching entry, in file order)"


def show_value(r: Resolved) -> str:
    """A value for people: 'missing'/'conflict', true/false, eps with its float32 reading."""
    if r.value is None:
        return "conflict" if r.provenance.kind == "conflict" else "missing"
    if isinstance(r.value, bool):
        return "true" if r.value else "false"
    if isinstance(r.value, float):
        text = repr(r.value)
        if r.stored is not None:
            text += f" ({r.stored}; nearest short decimal {r.short})"
        return text
    return str(r.value)


def value_document(r: Resolved) -> dict[str, Any]:
    p = r.provenance
    doc: dict[str, Any] = {
        "value": r.value,
        "provenance": {
            "kind": p.kind,
            "source": p.source or None,
            "key": p.key,
            "note": p.note or None,
        },
        "from": p.describe(),
    }
    if r.stored is not None:
        doc["stored"] = r.stored
        doc["short"] = r.short
    return doc


def _settings_doc(s: NormSettings) -> dict[str, Any]:
    from rmsnorm_eps.config.model import FIELDS

    return {name: value_document(s.get(name)) for name in FIELDS}


def document(c: NormConfig) -> dict[str, Any]:
    doc = _head("config show")
    doc.update(
        {
            "path": c.path,
            "kind": c.kind,
            "model": c.model,
            "source": c.source,
            "notes": list(c.notes),
            "defaults": _settings_doc(c.defaults),
            "layers": [
                {
                    "pattern": pattern,
                    "sets": [k for k, _ in entry.overrides],
                    "settings": _settings_doc(settings),
                }
                for (pattern, settings), entry in zip(c.resolved_entries(), c.entries, strict=True)
            ],
        }
    )
    return doc


def text(c: NormConfig, options: RenderOptions) -> str:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from rmsnorm_eps.config.model import FIELDS
    from rmsnorm_eps.escape import no_ci_command
    from rmsnorm_eps.reports.formats.text import NamedTable, render_renderables

    parts: list[Any] = [Text(_e(f"{c.path} ({c.kind}): model {c.model or '-'}"))]
    if c.source:
        parts.append(Text(_e(f"source: {c.source}")))
    defaults = Table(title="defaults", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    defaults.add_column("setting", no_wrap=True)
    defaults.add_column("value", no_wrap=True)
    defaults.add_column("from")
    for name in FIELDS:
        r = c.defaults.get(name)
        defaults.add_row(name, _e(show_value(r)), _e(r.provenance.describe(c.path)))
    parts.append(defaults)
    rows, overrides = _layer_rows(c)
    if len(rows) > PLAIN_ROWS:
        head = render_renderables(parts, options)
        lines = [*_plain_table(rows), *map(_e, overrides), *(_e(f"note: {n}") for n in c.notes)]
        return head + no_ci_command("".join(f"{line.rstrip(' ')}\n" for line in lines))
    layers = Table(title=_LAYERS_TITLE, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    layers.add_column("pattern")
    for name in _COLUMNS:
        layers.add_column(name)
    for row in rows:
        layers.add_row(*(_e(cell) for cell in row))
    parts.append(NamedTable(layers, noun="patterns"))
    parts += [Text(_e(line)) for line in overrides]
    parts += [Text(_e(f"note: {n}")) for n in c.notes]
    return render_renderables(parts, options)


def _layer_rows(c: NormConfig) -> tuple[list[tuple[str, ...]], list[str]]:
    """Each pattern's row (pattern and the values of :data:`_COLUMNS`, unescaped) and the
    override lines."""
    rows: list[tuple[str, ...]] = []
    overrides: list[str] = []
    for (pattern, s), entry in zip(c.resolved_entries(), c.entries, strict=True):
        rows.append((pattern, *(show_value(s.get(n)).split(" (")[0] for n in _COLUMNS)))
        overrides += [
            f"{pattern}: {k} = {show_value(v)} ({v.provenance.describe(c.path)})"
            for k, v in entry.overrides
        ]
    return rows, overrides


def _plain_table(rows: list[tuple[str, ...]]) -> list[str]:
    """The layers table as plain lines (:func:`~rmsnorm_eps.reports.table.table_lines`),
    cells escaped (widths measured on the escaped text)."""
    from rmsnorm_eps.reports.table import Column, table_lines

    columns = [Column(h) for h in ("pattern", *_COLUMNS)]
    return table_lines(columns, (tuple(map(_e, row)) for row in rows), _LAYERS_TITLE)


class ConfigShowReporter(Reporter, TextRole["NormConfig"], DocumentRole["NormConfig"]):
    """``config show``: text and json (it checks nothing)."""

    def text(self, result: NormConfig) -> str:
        return text(result, self.options)

    def document(self, result: NormConfig) -> dict[str, object]:
        return document(result)

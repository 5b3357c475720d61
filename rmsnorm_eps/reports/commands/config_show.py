"""``config show`` reports: a model's norm config as read from one file (defaults, then each
layer pattern with every matching entry applied, with provenance): document and text.

Values are unrounded in the document; the text shows eps with repr (shortest round trip) and,
for float32-stored eps, the nearest short decimal. It checks nothing (text and json only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.jsonvalues import head as _head
from rmsnorm_eps.reports.interface import DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.config.model import NormConfig, NormSettings, Resolved

__all__ = ["ConfigShowReporter", "show_value", "value_document"]

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


class ConfigShowReporter(Reporter, TextRole["NormConfig"], DocumentRole["NormConfig"]):
    """``config show``: text and json (it checks nothing)."""

    def text(self, result: NormConfig) -> str:
        from rmsnorm_eps.config.model import FIELDS
        from rmsnorm_eps.reports.blocks import NamedTable, Table, Text
        from rmsnorm_eps.reports.formats.text import render_blocks

        parts: list[Any] = [Text(_e(f"{result.path} ({result.kind}): model {result.model or '-'}"))]
        if result.source:
            parts.append(Text(_e(f"source: {result.source}")))
        defaults = Table(title="defaults")
        defaults.add_column("setting")
        defaults.add_column("value")
        defaults.add_column("from")
        for name in FIELDS:
            r = result.defaults.get(name)
            defaults.add_row(name, _e(show_value(r)), _e(r.provenance.describe(result.path)))
        parts.append(defaults)
        rows, overrides = _layer_rows(result)
        layers = Table(title=_LAYERS_TITLE)
        layers.add_column("pattern")
        for name in _COLUMNS:
            layers.add_column(name)
        for row in rows:
            layers.add_row(*(_e(cell) for cell in row))
        parts.append(NamedTable(layers, noun="patterns"))
        parts += [Text(_e(line)) for line in overrides]
        parts += [Text(_e(f"note: {n}")) for n in result.notes]
        return render_blocks(parts, self.options)

    def document(self, result: NormConfig) -> dict[str, object]:
        doc = _head("config show")
        doc.update(
            {
                "path": result.path,
                "kind": result.kind,
                "model": result.model,
                "source": result.source,
                "notes": list(result.notes),
                "defaults": _settings_doc(result.defaults),
                "layers": [
                    {
                        "pattern": pattern,
                        "sets": [k for k, _ in entry.overrides],
                        "settings": _settings_doc(settings),
                    }
                    for (pattern, settings), entry in zip(
                        result.resolved_entries(), result.entries, strict=True
                    )
                ],
            }
        )
        return doc

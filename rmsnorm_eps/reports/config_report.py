"""Documents and text for the config results (``config show``, ``config diff``, ``defaults``).

``document.document`` and ``text.render`` fall through to :func:`config_document` and
:func:`render_config_text` for these result types. Values are unrounded in the document; the
text shows eps with repr (shortest round trip) and, for float32-stored eps, the nearest short
decimal.
"""

from __future__ import annotations

from typing import Any

from rmsnorm_eps import __version__
from rmsnorm_eps.config.defaults import DefaultsResult
from rmsnorm_eps.config.model import FIELDS, NormConfig, NormSettings, Resolved
from rmsnorm_eps.config.resolve import ConfigDiff, FieldDifference

__all__ = ["config_document", "render_config_text", "show_value"]

_SCHEMA_VERSION = 1


def _head(command: str) -> dict[str, Any]:
    return {
        "schema_version": _SCHEMA_VERSION,
        "tool": "rmsnorm-eps",
        "version": __version__,
        "command": command,
    }


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


def _value_doc(r: Resolved) -> dict[str, Any]:
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
    return {name: _value_doc(s.get(name)) for name in FIELDS}


def _show_doc(c: NormConfig) -> dict[str, Any]:
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


def diff_line(d: FieldDifference, a_path: str | None = None, b_path: str | None = None) -> str:
    """One line explaining one difference (sources equal to A's or B's path are left out)."""
    label = "DIFF" if d.significant else "note"
    pats = ", ".join(d.patterns)
    if d.a.value is None or d.b.value is None:
        what = "cannot compare" if d.significant else "known on one side only"
    elif d.field == "eps":
        what = "differ beyond relative tolerance"
    else:
        what = "differ"
    a_from, b_from = d.a.provenance.describe(a_path), d.b.provenance.describe(b_path)
    return (
        f"{label} {d.field} [{pats}]: {what}: A {show_value(d.a)} ({a_from})"
        f" vs B {show_value(d.b)} ({b_from})"
    )


def _diff_doc(d: ConfigDiff) -> dict[str, Any]:
    doc = _head("config diff")
    doc.update(
        {
            "a": {"path": d.a.path, "kind": d.a.kind, "model": d.a.model},
            "b": {"path": d.b.path, "kind": d.b.kind, "model": d.b.model},
            "rel_tol": d.rel_tol,
            "equivalent": d.equivalent,
            "patterns": list(d.patterns),
            "differences": [
                {
                    "field": x.field,
                    "significant": x.significant,
                    "patterns": list(x.patterns),
                    "a": _value_doc(x.a),
                    "b": _value_doc(x.b),
                    "message": diff_line(x, d.a.path, d.b.path),
                }
                for x in d.differences
            ],
        }
    )
    return doc


def _defaults_doc(r: DefaultsResult) -> dict[str, Any]:
    doc = _head("defaults")
    doc.update(
        {
            "framework": r.framework,
            "dtype": r.dtype,
            "torch_version": r.torch_version,
            "rows": [
                {
                    "name": x.row.name,
                    "framework": x.row.framework,
                    "api": x.row.api,
                    "eps": x.eps,
                    "explanation": x.explanation,
                    "table_eps": x.row.eps,
                    "rule": x.row.rule,
                    "versions": x.row.versions,
                    "source": x.row.source,
                }
                for x in r.rows
            ],
        }
    )
    return doc


def config_document(result: object) -> dict[str, Any] | None:
    """The canonical dict for a config result, or None for other result types."""
    if isinstance(result, NormConfig):
        return _show_doc(result)
    if isinstance(result, ConfigDiff):
        return _diff_doc(result)
    if isinstance(result, DefaultsResult):
        return _defaults_doc(result)
    return None


def _show_text(c: NormConfig, options: Any) -> str:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from rmsnorm_eps.reports.text import render_renderables

    parts: list[Any] = [Text(f"{c.path} ({c.kind}): model {c.model or '-'}")]
    if c.source:
        parts.append(Text(f"source: {c.source}"))
    defaults = Table(title="defaults", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    defaults.add_column("setting", no_wrap=True)
    defaults.add_column("value", no_wrap=True)
    defaults.add_column("from")  # a long provenance wraps; the setting and value never do
    for name in FIELDS:
        r = c.defaults.get(name)
        defaults.add_row(name, show_value(r), r.provenance.describe(c.path))
    parts.append(defaults)
    layers = Table(
        title="layers (defaults + every matching entry, in file order)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    layers.add_column("pattern")
    for name in ("eps", "placement", "gain", "gain_baked", "dim", "norm"):
        layers.add_column(name)
    overrides: list[str] = []
    for (pattern, s), entry in zip(c.resolved_entries(), c.entries, strict=True):
        layers.add_row(
            pattern,
            *(
                show_value(s.get(n)).split(" (")[0]
                for n in ("eps", "placement", "gain", "gain_baked", "dim", "norm")
            ),
        )
        overrides += [
            f"{pattern}: {k} = {show_value(v)} ({v.provenance.describe(c.path)})"
            for k, v in entry.overrides
        ]
    parts.append(layers)
    parts += [Text(line) for line in overrides]
    parts += [Text(f"note: {n}") for n in c.notes]
    return render_renderables(parts, options)


def _diff_text(d: ConfigDiff, options: Any) -> str:
    lines = [
        f"A: {d.a.path} ({d.a.kind}, {d.a.model or '-'})",
        f"B: {d.b.path} ({d.b.kind}, {d.b.model or '-'})",
        f"compared {len(d.patterns)} layer pattern(s); eps within relative tolerance {d.rel_tol:g}",
    ]
    lines += [diff_line(x, d.a.path, d.b.path) for x in d.differences]
    n = len(d.significant)
    lines.append(
        "EQUIVALENT: eps, placement, gain and norm type agree"
        if d.equivalent
        else f"DIFFERENT: {n} difference(s) in eps, placement, gain or norm type"
    )
    return "\n".join(lines) + "\n"


def _defaults_text(r: DefaultsResult, options: Any) -> str:
    from rich import box
    from rich.table import Table

    from rmsnorm_eps.reports.text import render_renderables

    if len(r.rows) == 1 and r.rows[0].eps is not None:
        x = r.rows[0]
        return f"{x.eps:.8g}\n{x.row.api}: {x.explanation} [source: {x.row.source}]\n"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("api", ratio=3)
    table.add_column("eps", justify="right", no_wrap=True)
    table.add_column("rule (versions) [source]", overflow="fold", ratio=5)
    for x in r.rows:
        eps = f"{x.eps:.8g}" if x.eps is not None else "-"
        rule = x.explanation if x.row.framework == "torch" else x.row.rule
        table.add_row(x.row.name, x.row.api, eps, f"{rule} ({x.row.versions}) [{x.row.source}]")
    return render_renderables([table], options)


def render_config_text(result: object, options: Any) -> str | None:
    """Text for a config result, or None for other result types."""
    if isinstance(result, NormConfig):
        return _show_text(result, options)
    if isinstance(result, ConfigDiff):
        return _diff_text(result, options)
    if isinstance(result, DefaultsResult):
        return _defaults_text(result, options)
    return None

"""Text rendering of ``compare`` and ``precision`` results (rich tables; rounded for display
only, every decision was taken on unrounded values)."""

from __future__ import annotations

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from rmsnorm_eps.compare.analysis import CompareLayer, CompareReport
from rmsnorm_eps.compare.precision import PrecisionReport, PrecisionRow
from rmsnorm_eps.compare.spec import EpsSpec, LayerSpecs
from rmsnorm_eps.reports import RenderOptions

__all__ = ["parts", "supports"]


def _f(value: float | None, digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _idx(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def supports(result: object) -> bool:
    return isinstance(result, (CompareReport, PrecisionReport))


def _table(*columns: str) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i == 0 else "right")
    return t


def _layer_details(layer: CompareLayer) -> list[RenderableType]:
    eps_from = layer.spec_from.eps
    out: list[RenderableType] = []
    if layer.worst:
        out.append(Text(f"{layer.name}: largest |change| ({len(layer.worst)} input(s))"))
        worst = _table("index", "q", "q/eps_from", "factor", "change")
        for m in layer.worst:
            worst.add_row(_idx(m.index), _f(m.q), _f(m.ratio), _f(m.factor), f"{m.change:+.6g}")
        out.append(worst)
    if layer.decades:
        out.append(Text(f"{layer.name}: by decade of q/eps_from (eps_from {eps_from:g})"))
        dec = _table("q/eps_from", "count", "moved", "max |change|")
        for d in layer.decades:
            dec.add_row(
                f"[1e{d.decade}, 1e{d.decade + 1})",
                str(d.count),
                str(d.moved),
                _f(d.max_abs_change),
            )
        if layer.zero_count:
            dec.add_row("q = 0", str(layer.zero_count), "0", "0")
        out.append(dec)
    if layer.nonfinite_examples:
        shown = ", ".join(
            f"{_idx(m.index)} q={m.q:g} factor={m.factor:g}" for m in layer.nonfinite_examples
        )
        out.append(
            Text(
                f"{layer.name}: {layer.nonfinite_q} nonfinite q ({layer.nan_count} NaN, "
                f"{layer.inf_count} inf) and {layer.nonfinite_factor} nonfinite factor(s), each a "
                f"violation: {shown}"
            )
        )
    return out


def _position_table(report: CompareReport) -> list[RenderableType]:
    """For dumps with token positions: first token (position 0) next to the other tokens."""
    from rmsnorm_eps.reports.text import position_split_parts

    return position_split_parts(
        report.layers,
        [
            ("n", lambda p: str(p.count)),
            ("max |change|", lambda p: _f(p.max_abs_change, 4)),
            ("moved", lambda p: str(p.moved)),
            ("viol", lambda p: str(p.violations)),
        ],
    )


def _per_layer_lines(side: str, report: CompareReport) -> list[str]:
    """One line per distinct setting of a ``config`` side: the setting, its provenance, the
    layers that use it (dump order)."""
    groups: dict[EpsSpec, list[str]] = {}
    for layer in report.layers:
        spec = layer.spec_from if side == "from" else layer.spec_to
        groups.setdefault(spec, []).append(layer.name)
    lines = []
    for spec, names in groups.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"  {spec.describe()} for {len(names)} layer(s): {shown}")
        lines.append(f"    ({spec.note})")
    return lines


def _compare_parts(report: CompareReport, options: RenderOptions) -> list[RenderableType]:
    kind = "raw activations, q = mean(x^2) over the last axis" if report.raw else "q values"
    lines = [f"{report.source} ({kind})"]
    for side, spec in (("from", report.spec_from), ("to", report.spec_to)):
        head = f"{side}:{' ' if side == 'from' else '   '}{spec.describe()}"
        if side == "to" and report.scale != 1.0:
            head += f", inputs scaled by {report.scale:g}"
        lines.append(head)
        if isinstance(spec, LayerSpecs):
            lines += _per_layer_lines(side, report)
    for side, spec in (("from", report.spec_from), ("to", report.spec_to)):
        if isinstance(spec, EpsSpec) and spec.note:
            lines.append(f"{side} default: {spec.note}")
    lines.append(f"factor = y_to/y_from per input; moved when |factor - 1| > {report.tolerance:g}")
    parts: list[RenderableType] = [Text("\n".join(lines))]
    table = _table(
        "layer",
        "count",
        "nonfinite",
        "max |change|",
        "min factor",
        "max factor",
        "moved",
        "moved %",
    )
    for layer in report.layers:
        table.add_row(
            layer.name,
            str(layer.count),
            str(layer.nonfinite_q + layer.nonfinite_factor),
            _f(layer.max_abs_change),
            _f(layer.min_factor),
            _f(layer.max_factor),
            str(layer.moved),
            f"{100.0 * layer.moved / layer.count:.3g}%" if layer.count else "-",
            style="bold" if layer.violations else None,
        )
    parts.append(table)
    parts.extend(_position_table(report))
    for layer in report.layers:
        if layer.violations:
            parts.extend(_layer_details(layer))
    parts.append(
        Text(
            f"Total: {report.violations} violation(s) in {len(report.layers_affected)} of "
            f"{len(report.layers)} layer(s) ({report.moved} moved by more than "
            f"{report.tolerance:g}, {report.nonfinite} nonfinite) out of {report.count} inputs; "
            f"max |change| {_f(report.max_abs_change)}"
        )
    )
    for u in report.skipped:
        parts.append(Text(f"SKIPPED (unreadable, not analysed): {u.name}: {u.problem}"))
    if options.gate is not None:
        verdict = "PASS: " if options.gate.passed else "FAIL: "
        if report.skipped:  # part of the dump was not checked: never a plain PASS
            verdict = f"INCOMPLETE ({len(report.skipped)} layer(s) skipped): " + verdict
        parts.append(Text(verdict + options.gate.reason))
    return parts


def _flags(r: PrecisionRow) -> str:
    if r.rounds_to_zero:
        return "ROUNDS TO ZERO"
    if r.overflows:
        return "OVERFLOWS"
    return "subnormal" if r.subnormal else "normal"


def _precision_parts(report: PrecisionReport) -> list[RenderableType]:
    rows = report.rows
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column(f"eps = {report.eps:g}", justify="left")
    for r in rows:
        t.add_column(f"{r.dtype} (p={r.precision_bits})", justify="right")

    def row(label: str, cells: list[str]) -> None:
        t.add_row(label, *cells)

    row("stored eps", [f"{r.stored:.9g}" for r in rows])
    row("relative error", [f"{r.relative_error:+.3g}" for r in rows])
    row("eps is", [_flags(r) for r in rows])
    row("q + eps == q from q =", [_f(r.absorbed_from) for r in rows])
    row("... for every q >=", [_f(r.always_absorbed_from) for r in rows])
    row("1 - A there (exact)", [_f(r.loss_at_absorption, 3) for r in rows])
    row("checked by adding", ["yes" if r.verified else "MISMATCH" for r in rows])
    row("largest q", [_f(r.max) for r in rows])
    row("q flushes to 0 if <=", [_f(r.q_flush_to_zero_at_or_below, 4) for r in rows])
    row("x*x finite up to |x| =", [_f(r.square_finite_max) for r in rows])
    row("x*x overflows from", [_f(r.square_overflow_from) for r in rows])
    notes = []
    for r in rows:
        if r.rounds_to_zero:
            notes.append(
                f"{r.dtype}: eps rounds to 0 (below half the smallest subnormal "
                f"{r.smallest_subnormal:.4g}): it vanishes; a zero input gives 0/0"
            )
        elif r.overflows:
            notes.append(f"{r.dtype}: eps overflows to inf: every output becomes 0")
        elif r.subnormal:
            notes.append(
                f"{r.dtype}: eps is subnormal (< {r.smallest_normal:.4g}): stored with "
                f"relative error {r.relative_error:+.3g}"
            )
        if r.absorbed_from and r.stored:
            notes.append(
                f"{r.dtype}: eps acts on q + eps only for q < {r.absorbed_from:.6g} "
                f"(q/eps < {r.absorbed_from / r.stored:.6g})"
            )
    return [t, Text("\n".join(notes))] if notes else [t]


def parts(result: object, options: RenderOptions) -> list[RenderableType]:
    """Renderables for a compare or precision result."""
    if isinstance(result, CompareReport):
        return _compare_parts(result, options)
    assert isinstance(result, PrecisionReport)
    return _precision_parts(result)

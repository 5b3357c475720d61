"""``compare`` reports: how much each layer's output moves when eps (or its placement, dtype)
changes from one setting to another: the document, the text tables, and two checks per layer
(``moved`` and ``nonfinite``), with the zero vectors and the safe eps of the ``--to`` side.

Why one module of ~470 lines: it is the compare command's whole reporter (document, text and
checks), the unit a new field touches; the pieces it shares with ratio live there."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.jsonvalues import head, jnum
from rmsnorm_eps.reports.blocks import Block, NamedTable, Text, simple_table
from rmsnorm_eps.reports.checks import (
    Check,
    CheckReport,
    Level,
    Number,
    Rule,
    verdict_fact,
    with_skipped,
)
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.commands._layers import (
    members_document,
    members_parts,
    position_split_parts,
    tail_parts,
)
from rmsnorm_eps.reports.commands.ratio import (
    DOCUMENT_VERSION,
    ZERO_RULE,
    ZERO_RULE_VIOLATION,
    quantity_kind,
    quantity_label,
    safe_eps_document,
    safe_eps_parts,
    zero_part,
)
from rmsnorm_eps.reports.document import gate_document, skipped_document
from rmsnorm_eps.reports.formats.text import fmt_index as _idx
from rmsnorm_eps.reports.formats.text import render_blocks
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole

if TYPE_CHECKING:  # compare.analysis imports numpy
    from rmsnorm_eps.compare.analysis import CompareLayer, CompareReport, MovedInput
    from rmsnorm_eps.compare.spec import EpsSpec, LayerSpecs

__all__ = ["COMPARE_RULES", "CompareReporter"]


# ----------------------------------------------------------------------------- json
def _side(side: EpsSpec | LayerSpecs) -> dict[str, Any]:
    """One SPEC, or for ``config`` the config file (each layer's ``from``/``to`` has its own)."""
    from rmsnorm_eps.compare.spec import LayerSpecs

    if isinstance(side, LayerSpecs):
        return {"text": side.text, "config": side.config, "per_layer": True}
    return asdict(side)  # every field of the spec, in field order


def _moved(m: MovedInput) -> dict[str, Any]:
    return {
        "index": list(m.index),
        "q": jnum(m.q),
        "ratio": jnum(m.ratio),
        "factor": jnum(m.factor),
        "change": jnum(m.change),
    }


def _layer(layer: CompareLayer) -> dict[str, Any]:
    doc = {
        "name": layer.name,
        "from": asdict(layer.spec_from),
        "to": asdict(layer.spec_to),
        "shape": list(layer.shape),
        "dtype": layer.dtype,
        "raw_dim": layer.raw_dim,
        "quantity": layer.quantity,
        "count": layer.count,
        "nan": layer.nan_count,
        "inf": layer.inf_count,
        "zero": layer.zero_count,
        "min_pos_q": jnum(layer.min_pos_q),
        "nonfinite_factor": layer.nonfinite_factor,
        "moved": layer.moved,
        "violations": layer.violations,
        "violation_fraction": layer.violation_fraction,
        "max_abs_change": jnum(layer.max_abs_change),
        "min_factor": jnum(layer.min_factor),
        "max_factor": jnum(layer.max_factor),
        "worst": [_moved(m) for m in layer.worst],
        "nonfinite_examples": [_moved(m) for m in layer.nonfinite_examples],
        "decades": [
            {
                "decade": d.decade,
                "count": d.count,
                "moved": d.moved,
                "max_abs_change": jnum(d.max_abs_change),
            }
            for d in layer.decades
        ],
        **safe_eps_document(layer),
        "within_safe_eps": layer.within_safe_eps,
    }
    if layer.first_token is not None and layer.other_tokens is not None:
        # dumps with token positions: position 0 and the others, with the same keys as the
        # layer (their indices are indices of the whole layer)
        doc["first_token"] = _layer(layer.first_token)
        doc["other_tokens"] = _layer(layer.other_tokens)
    return doc


# ----------------------------------------------------------------------------- text
def _layer_details(layer: CompareLayer) -> list[Block]:
    eps_from = layer.spec_from.eps
    q = layer.quantity  # q = mean(x^2), or v (LayerNorm variance)
    out: list[Block] = []
    if layer.worst:
        out.append(Text(f"{_e(layer.name)}: largest |change| ({len(layer.worst)} input(s))"))
        worst = simple_table("index", q, f"{q}/eps_from", "factor", "change")
        for m in layer.worst:
            worst.add_row(_idx(m.index), _g(m.q), _g(m.ratio), _g(m.factor), f"{m.change:+.6g}")
        out.append(worst)
    if layer.decades:
        out.append(Text(f"{_e(layer.name)}: by decade of {q}/eps_from (eps_from {eps_from:g})"))
        dec = simple_table(f"{q}/eps_from", "count", "moved", "max |change|")
        for d in layer.decades:
            dec.add_row(
                f"[1e{d.decade}, 1e{d.decade + 1})",
                str(d.count),
                str(d.moved),
                _g(d.max_abs_change),
            )
        if layer.zero_count:
            moved = str(layer.zero_count) if layer.zeros_violate else "0"
            dec.add_row(f"{q} = 0 (zero vectors)", str(layer.zero_count), moved, "0")
        out.append(dec)
    if layer.nonfinite_examples:
        shown = ", ".join(
            f"{_idx(m.index)} q={m.q:g} factor={m.factor:g}" for m in layer.nonfinite_examples
        )
        out.append(
            Text(
                f"{_e(layer.name)}: {layer.nonfinite_q} nonfinite q ({layer.nan_count} NaN, "
                f"{layer.inf_count} inf) and {layer.nonfinite_factor} nonfinite factor(s), each a "
                f"violation: {shown}"
            )
        )
    return out


def _per_layer_lines(side: str, report: CompareReport) -> list[str]:
    """One line per distinct setting of a ``config`` side: the setting, its provenance, the
    layers that use it (dump order)."""
    groups: dict[EpsSpec, list[str]] = {}
    for layer in report.layers:
        spec = layer.spec_from if side == "from" else layer.spec_to
        groups.setdefault(spec, []).append(_e(layer.name))
    lines = []
    for spec, names in groups.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"  {_e(spec.describe())} for {len(names)} layer(s): {shown}")
        lines.append(f"    ({_e(spec.note)})")
    return lines


def _within_text(report: CompareReport) -> str:
    """Whether the ``--to`` eps is within the safe eps, overall and which layers are not."""
    within = report.within_safe_eps
    if within is None:
        return f"--to eps vs safe eps: undefined (tolerance {report.tolerance:g} is not in (0, 1))"
    if within:
        return f"--to eps within the safe eps: yes, in all {len(report.layers)} layer(s)"
    out = [_e(ly.name) for ly in report.layers if ly.within_safe_eps is False]
    shown = ", ".join(out[:4]) + (f" and {len(out) - 4} more" if len(out) > 4 else "")
    return f"--to eps within the safe eps: no, in {len(out)} layer(s): {shown}"


def _safe_eps_parts(report: CompareReport) -> list[Block]:
    bound = report.bound_ratio
    qv = quantity_label(report.layers)
    title = (
        f"Safe eps for --to: the largest eps at which every positive finite {qv}, as the --to "
        f"side sees it, has {qv}/eps >= {_g(bound, 12)} (delta = tolerance {report.tolerance:g})"
        if bound is not None
        else f"Safe eps for --to: undefined (tolerance {report.tolerance:g} is not in (0, 1))"
    )
    parts = safe_eps_parts(report.layers, report, "--to eps", compare=True, title=title)
    return [*parts, Text(_within_text(report) + "\n")]


# ----------------------------------------------------------------------------- checks
COMPARE_RULES = (
    Rule(
        "compare/moved",
        "moved",
        "Inputs whose output moves by more than the tolerance when the setting changes: "
        "|factor - 1| > tolerance with factor = y_to/y_from = den_from(q)/den_to(q) "
        "(|change| equal to the tolerance passes).",
    ),
    Rule(
        "compare/nonfinite",
        "nonfinite",
        "NaN or +inf q values and nonfinite factors (a denominator that overflowed or vanished); "
        "each one counts as a violation.",
    ),
)


def _moved_check(layer: CompareLayer, tol: float, bad: Level) -> Check:
    """``compare/moved``: fails when some input moves by more than the tolerance (or, with
    ``--zero-is-violation``, when the layer has a zero vector)."""
    nums: dict[str, Number] = {
        "count": layer.count,
        "moved": layer.moved,
        "fraction": layer.moved / layer.count if layer.count else 0.0,
        "max_abs_change": layer.max_abs_change,
        "min_factor": layer.min_factor,
        "max_factor": layer.max_factor,
        "tolerance": tol,
        "zero_vectors": layer.zero_count,
        "min_pos_q": layer.min_pos_q,
        "safe_eps": layer.safe_eps,
        "safe_eps_margin_decades": layer.safe_eps_margin,
        "within_safe_eps": _tristate(layer.within_safe_eps),
    }
    zeros = layer.zero_count if layer.zeros_violate else 0
    moved = layer.moved + zeros
    zero_text = f"; {zeros} zero vector(s), each a violation" if zeros else ""
    if layer.zero_count and not zeros:
        zero_text = f"; {layer.zero_count} zero vector(s) (output 0 under any eps)"
    safe_text = _safe_text(layer)
    if layer.moved:
        w = layer.worst[0] if layer.worst else None
        where = (
            f"; largest at index {_idx(w.index)} ({layer.quantity} {_g(w.q)}, "
            f"{layer.quantity}/eps_from {_g(w.ratio)}, "
            f"change {w.change:+.6g})"
            if w is not None
            else ""
        )
        msg = (
            f"{layer.name}: {layer.moved} of {layer.count} inputs "
            f"({_g(100.0 * layer.moved / layer.count, 3)}%) move by more than {_g(tol, 12)}; "
            f"max |change| {_g(layer.max_abs_change)}{where}{zero_text}{safe_text}"
        )
    elif layer.max_abs_change is not None:
        msg = (
            f"{layer.name}: no input moves by more than {_g(tol, 12)}; "
            f"max |change| {_g(layer.max_abs_change)}{zero_text}{safe_text}"
        )
    else:
        msg = f"{layer.name}: no finite factor to check{zero_text}"
    return Check("compare/moved", layer.name, moved == 0, "note" if moved == 0 else bad, msg, nums)


def _nonfinite_check(layer: CompareLayer, bad: Level) -> Check:
    """``compare/nonfinite``: fails when some q is NaN/+inf or some factor is nonfinite."""
    nf = layer.nonfinite_q + layer.nonfinite_factor
    nf_nums: dict[str, Number] = {
        "count": layer.count,
        "nonfinite": nf,
        "nan": layer.nan_count,
        "inf": layer.inf_count,
        "nonfinite_factor": layer.nonfinite_factor,
    }
    if nf:
        first = layer.nonfinite_examples[0] if layer.nonfinite_examples else None
        where = f", first at index {_idx(first.index)}" if first is not None else ""
        msg = (
            f"{layer.name}: {nf} nonfinite of {layer.count} inputs ({layer.nan_count} NaN q, "
            f"{layer.inf_count} inf q, {layer.nonfinite_factor} nonfinite factor){where}"
        )
    else:
        msg = f"{layer.name}: no NaN/inf q and no nonfinite factor among {layer.count} inputs"
    return Check("compare/nonfinite", layer.name, nf == 0, "note" if nf == 0 else bad, msg, nf_nums)


def _tristate(value: bool | None) -> str:
    return "undefined" if value is None else "yes" if value else "no"


def _safe_text(layer: CompareLayer) -> str:
    if layer.safe_eps is None:
        return f"; safe eps {layer.safe_eps_note or 'undefined'}"
    return (
        f"; safe eps {_g(layer.safe_eps, 6)}, --to eps within it: "
        f"{_tristate(layer.within_safe_eps)}"
    )


def _safe_fact(report: CompareReport) -> str:
    within = f"; --to eps within it: {_tristate(report.within_safe_eps)}"
    if report.safe_eps is None:
        return (report.safe_eps_note or "undefined") + within
    return f"{_g(report.safe_eps, 6)} (margin {_g(report.safe_eps_margin, 3)} decades){within}"


class CompareReporter(
    Reporter, TextRole["CompareReport"], DocumentRole["CompareReport"], ChecksRole["CompareReport"]
):
    """``compare``: every format; the gate decides the verdict and the level of a failed check."""

    def text(self, result: CompareReport) -> str:
        """The text report."""
        from rmsnorm_eps.compare.spec import EpsSpec, LayerSpecs

        kind = quantity_kind(result.layers, result.raw)
        lines = [f"{_e(result.source)} ({kind})"]
        for side, spec in (("from", result.spec_from), ("to", result.spec_to)):
            head = f"{side}:{' ' if side == 'from' else '   '}{_e(spec.describe())}"
            if side == "to" and result.scale != 1.0:
                head += f", inputs scaled by {result.scale:g}"
            lines.append(head)
            if isinstance(spec, LayerSpecs):
                lines += _per_layer_lines(side, result)
        for side, spec in (("from", result.spec_from), ("to", result.spec_to)):
            if isinstance(spec, EpsSpec) and spec.note:
                label = "default" if spec.framework is not None else "note"
                lines.append(f"{side} {label}: {_e(spec.note)}")
        lines.append(
            f"factor = y_to/y_from per input; moved when |factor - 1| > {result.tolerance:g}"
        )
        parts: list[Block] = [Text("\n".join(lines))]
        table = simple_table(
            "layer",
            "count",
            "nonfinite",
            "max |change|",
            "min factor",
            "max factor",
            "moved",
            "moved %",
        )
        for layer in result.layers:
            table.add_row(
                _e(layer.name),
                str(layer.count),
                str(layer.nonfinite_q + layer.nonfinite_factor),
                _g(layer.max_abs_change),
                _g(layer.min_factor),
                _g(layer.max_factor),
                str(layer.moved),
                f"{100.0 * layer.moved / layer.count:.3g}%" if layer.count else "-",
                style="bold" if layer.violations else None,
            )
        parts.append(NamedTable(table))
        parts.extend(_safe_eps_parts(result))
        parts += position_split_parts(  # dumps with token positions: position 0 and the rest
            result.layers,
            [
                ("n", lambda p: str(p.count)),
                ("max |change|", lambda p: _g(p.max_abs_change, 4)),
                ("moved", lambda p: str(p.moved)),
                ("viol", lambda p: str(p.violations)),
            ],
        )
        for layer in result.layers:
            if layer.violations:
                parts.extend(_layer_details(layer))
        parts.extend(members_parts(result))
        parts.append(
            Text(
                f"Total: {result.violations} violation(s) in {len(result.layers_affected)} of "
                f"{len(result.layers)} layer(s) ({result.moved} moved by more than "
                f"{result.tolerance:g}, {result.nonfinite} nonfinite{zero_part(result)}) out of "
                f"{result.count} inputs; "
                f"max |change| {_g(result.max_abs_change)}"
            )
        )
        parts.extend(tail_parts(result.skipped, self.options))
        return render_blocks(parts, self.options)

    def document(self, result: CompareReport) -> dict[str, object]:
        """The compare document."""
        doc: dict[str, Any] = head("compare")
        doc["schema_version"] = DOCUMENT_VERSION
        doc.update(
            {
                "source": result.source,
                "raw": result.raw,
                "from": _side(result.spec_from),
                "to": _side(result.spec_to),
                "tolerance": result.tolerance,
                "scale": result.scale,
                "factor": "y_to/y_from = scale*den_from(q)/den_to(scale^2*q); change = factor - 1",
                "tie_rule": "|change| == tolerance passes; moved when |change| > tolerance",
                "zero_rule": ZERO_RULE_VIOLATION if result.zero_is_violation else ZERO_RULE,
                "zero_is_violation": result.zero_is_violation,
                "safe_eps_bound": {
                    "delta": result.tolerance,
                    "min_ratio": jnum(result.bound_ratio),
                    "rule": "safe_eps: largest --to eps with scale^2*q/eps >= min_ratio(tolerance) "
                    "for every positive finite q",
                },
                "top_k": result.top_k,
                "summary": {
                    "layers": len(result.layers),
                    "count": result.count,
                    "moved": result.moved,
                    "zero": result.zero_count,
                    "nonfinite": result.nonfinite,
                    "violations": result.violations,
                    "violation_fraction": result.violation_fraction,
                    "max_abs_change": jnum(result.max_abs_change),
                    "layers_affected": list(result.layers_affected),
                    **safe_eps_document(result),
                    "within_safe_eps": result.within_safe_eps,
                    **members_document(result),
                },
                "gate": gate_document(self.options.gate),
                "layers": [_layer(layer) for layer in result.layers],
            }
        )
        doc.update(skipped_document(result.skipped))
        return doc

    def checks(self, result: CompareReport) -> CheckReport:
        """Two checks per layer of a :class:`~rmsnorm_eps.compare.analysis.CompareReport`.

        ``compare/moved`` fails when some input has ``|change| > tolerance``; ``compare/nonfinite``
        when some q is NaN/+inf or some factor is nonfinite. A failed check is an ``error``, or a
        ``warning`` when the gate passed within its budget.
        """
        passed = (
            result.violations == 0 if self.options.gate is None else bool(self.options.gate.passed)
        )
        bad: Level = "warning" if passed else "error"
        tol = result.tolerance
        checks: list[Check] = []
        for layer in result.layers:
            checks.append(_moved_check(layer, tol, bad))
            checks.append(_nonfinite_check(layer, bad))
        verdict = (
            self.options.gate.reason
            if self.options.gate is not None
            else ("no violations" if passed else f"{result.violations} violation(s)")
        )
        kind = (
            quantity_kind(result.layers, result.raw, str)
            if quantity_label(result.layers) != "q"
            else ("activations (q = mean(x^2) over the last axis)" if result.raw else "q values")
        )
        scale = (
            "" if result.scale == 1.0 else f"; the --to side sees c*x with c = {_g(result.scale)}"
        )
        facts = (
            ("source", f"{result.source} ({kind})"),
            ("from", result.spec_from.describe()),
            ("to", result.spec_to.describe() + scale),
            ("rule", f"moved when |y_to/y_from - 1| > {_g(tol, 12)}"),
            ("inputs", f"{result.count} in {len(result.layers)} layer(s)"),
            (
                "violations",
                f"{result.violations} ({result.moved} moved, {result.nonfinite} nonfinite"
                f"{zero_part(result)}) in {len(result.layers_affected)} layer(s); "
                f"max |change| {_g(result.max_abs_change)}",
            ),
            ("safe eps", _safe_fact(result)),
            verdict_fact(passed, verdict),
        )
        checked = CheckReport(
            command="compare",
            title=f"rmsnorm-eps compare: {result.source}",
            source=result.source,
            subject="layer",
            rules=COMPARE_RULES,
            checks=tuple(checks),
            passed=passed,
            verdict=verdict,
            facts=facts,
        )
        return with_skipped(checked, tuple(result.skipped))

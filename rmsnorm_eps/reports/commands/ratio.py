"""``ratio`` reports: the per-layer q/eps table, histograms and worst inputs (text), the
canonical document (json), and two checks per layer (markdown, github, junit, sarif).

A merged report (``merge``: a ratio report of shards) is rendered here too, with each worst
input's shard.

Why one module of ~590 lines: it is the ratio command's whole reporter (text, document and
checks), the unit a new format or field touches; merge and compare reuse its pieces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.jsonvalues import head, jnum
from rmsnorm_eps.reports.blocks import Block, NamedTable, Table, Text
from rmsnorm_eps.reports.checks import Check, CheckReport, Level, Number, Rule, with_skipped
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.commands._layers import (
    members_document,
    members_parts,
    position_split_parts,
    tail_parts,
)
from rmsnorm_eps.reports.document import gate_document, skipped_document
from rmsnorm_eps.reports.formats.text import fmt_index, render_blocks
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole
from rmsnorm_eps.reports.options import HISTOGRAM_AUTO_LAYERS, RenderOptions

if TYPE_CHECKING:  # analysis imports numpy
    from rmsnorm_eps.analysis import RatioReport
    from rmsnorm_eps.layer_record import LayerResult

__all__ = [
    "RATIO_RULES",
    "RatioReporter",
    "histogram_rows",
    "quantity_kind",
    "quantity_label",
    "safe_eps_document",
    "safe_eps_parts",
    "zero_part",
]

#: ``schema_version`` of the ratio, merge and compare documents: 2 since zero vectors are
#: counted apart (below_bound, violations, min_ratio and worst changed meaning) and the safe
#: eps was added.
DOCUMENT_VERSION = 2

#: What every document says about zero vectors (q = 0 exactly).
ZERO_RULE = "q == 0 is a zero vector (output 0 under any eps): counted in zero, not a violation"
ZERO_RULE_VIOLATION = "q == 0 is a zero vector: each one is a violation (--zero-is-violation)"


def zero_part(report: Any) -> str:
    """``, N zero vector(s) ...`` for a report's one-line summary (``""`` without zeros)."""
    n = report.zero_count
    if not n:
        return ""
    if report.zero_is_violation:
        return f", {n} zero vector(s), each a violation"
    return f"; {n} zero vector(s), output 0 under any eps, not counted"


def safe_eps_document(item: Any) -> dict[str, Any]:
    """The safe eps fields of a layer or a report: the value, the margin in decades from the
    configured eps (``log10(safe_eps / eps)``) and why there is none (``""`` when there is)."""
    return {
        "safe_eps": jnum(item.safe_eps),
        "safe_eps_margin_decades": jnum(item.safe_eps_margin),
        "safe_eps_note": item.safe_eps_note,
    }


HISTOGRAM_BAR = 40  # characters of the longest bar


# ----------------------------------------------------------------------------- text
def quantity_label(layers: Any) -> str:
    """``q`` (RMSNorm: mean(x^2)), ``v`` (LayerNorm: the variance) or ``q|v`` (both kinds)."""
    kinds = {getattr(layer, "quantity", "q") for layer in layers}
    return "q|v" if len(kinds) > 1 else (kinds.pop() if kinds else "q")


def quantity_kind(layers: Any, raw: bool, esc: Callable[[str], str] = _e) -> str:
    """What the figures are of, for a report's header line (layer names through ``esc``:
    the text escape, or ``str`` where the output format escapes them itself)."""
    label = quantity_label(layers)
    if label == "q":
        return "raw activations, q = mean(x^2) over the last axis" if raw else "q values"
    v = "v = mean((x - mean x)^2) over the last axis (LayerNorm variance)"
    if label == "v":
        return f"raw activations, {v}" if raw else "v values (LayerNorm variance)"
    names = ", ".join(esc(x.name) for x in layers if getattr(x, "quantity", "q") == "v")
    base = "raw activations, q = mean(x^2) over the last axis" if raw else "q values"
    return f"{base}; for the LayerNorm layers {names}: {v if raw else 'v values'}"


def _shard_index(
    index: tuple[int, ...], shard: int | None, shard_index: tuple[int, ...] | None
) -> str:
    """``[i, j]``, or in a merged report ``[i, j] (shard s [i', j])``."""
    if shard is None:
        return fmt_index(index)
    return f"{fmt_index(index)} (shard {shard} {fmt_index(shard_index or ())})"


def _eps_source_parts(report: RatioReport) -> list[Block]:
    """ratio --config: one line per (eps, source) with the layers that took it."""
    groups: dict[tuple[float, str], list[str]] = {}
    for layer in report.layers:
        if layer.eps_source is not None:
            groups.setdefault((layer.eps, layer.eps_source), []).append(_e(layer.name))
    lines = []
    for (eps, source), names in groups.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"eps {_g(eps)} from {_e(source)}: {shown}")
    return [Text("\n".join(lines))] if lines else []


def _layer_row(layer: LayerResult) -> list[str]:
    return [
        _e(layer.name),
        _g(layer.eps),
        str(layer.count),
        str(layer.nonfinite),
        str(layer.zero_count),
        _g(layer.min_pos_q),
        _g(layer.min_ratio),
        _g(layer.min_attenuation),
        str(layer.below_bound),
        f"{100.0 * layer.violation_fraction:.3g}%",
    ]


def histogram_rows(layer: LayerResult, bound: float) -> list[tuple[str, int, str]]:
    """``(label, count, mark)`` per decade of r = q/eps, q = 0 (zero vectors, first) and
    NaN/inf when present.

    Decade k holds 10**k <= r < 10**(k+1). ``mark`` is "below bound" when the whole decade is
    below the bound (10**(k+1) <= bound), "<- bound" when the bound falls inside it (some of
    its inputs may pass), else "". Rows between the first and last decade are shown even when
    empty, so bar positions read as a log axis.
    """
    from rmsnorm_eps.summary import decade_edge

    counts = dict(layer.decades)
    rows: list[tuple[str, int, str]] = []
    if layer.zero_count:
        mark = "violation" if layer.zeros_violate else "zero vectors"
        rows.append((f"{layer.quantity} = 0", layer.zero_count, mark))
    if counts:
        for k in range(min(counts), max(counts) + 1):
            lo, hi = decade_edge(k), decade_edge(k + 1)
            mark = "below bound" if hi <= bound else ("<- bound" if lo < bound else "")
            rows.append((f"1e{k} <= r < 1e{k + 1}", counts.get(k, 0), mark))
    if layer.nonfinite:
        rows.append(("NaN/inf", layer.nonfinite, "violation"))
    return rows


def _histogram(layer: LayerResult, bound: float, color: bool) -> list[Block]:
    """The title line and the table (a table title would wrap at the table's width)."""
    qv = layer.quantity
    title = Text(f"{_e(layer.name)}: inputs per decade of r = {qv}/eps (bound r >= {_g(bound)})")
    rows = histogram_rows(layer, bound)
    peak = max((c for _, c, _ in rows), default=0)
    table = Table()
    table.add_column(f"r = {qv}/eps")
    table.add_column("count", justify="right")
    table.add_column("")
    table.add_column("")
    for label, count, mark in rows:
        n = 0 if count == 0 or peak == 0 else max(1, round(HISTOGRAM_BAR * count / peak))
        style = "red" if color and mark in ("below bound", "violation") else None
        table.add_row(label, str(count), "#" * n, mark, style=style)
    return [title, table]


def _wants_histogram(layer: LayerResult, report: RatioReport, options: RenderOptions) -> bool:
    mode = options.histogram
    if mode == "auto":
        mode = "all" if len(report.layers) <= HISTOGRAM_AUTO_LAYERS else "violating"
    return mode == "all" or (mode == "violating" and layer.violations > 0)


def _margin(m: float | None) -> str:
    return "-" if m is None else f"{m:+.3g}"


def safe_eps_parts(
    layers: Any, report: Any, eps_name: str, compare: bool = False, title: str | None = None
) -> list[Block]:
    """The safe eps table: per layer its safe eps and the margin in decades from the configured
    eps (``eps_name``: ``eps``, or ``--to eps`` for compare, whose table also shows the zero
    vectors, the smallest positive q and whether the target is within), then the model's line
    (the minimum over layers)."""
    qv = quantity_label(layers)
    table = Table()
    columns = ["layer", "safe eps", "margin (dec)"]
    if compare:
        columns = ["layer", "zero", f"min {qv} > 0", "safe eps", "margin (dec)", "within"]
    for name in columns:
        table.add_column(name, justify="left" if name == "layer" else "right")
    for layer in layers:
        safe = _g(layer.safe_eps) if layer.safe_eps is not None else layer.safe_eps_note[:4]
        row = [_e(layer.name), safe.rstrip(":"), _margin(layer.safe_eps_margin)]
        if compare:
            within = layer.within_safe_eps
            yes = "-" if within is None else "yes" if within else "no"
            row = [row[0], str(layer.zero_count), _g(layer.min_pos_q), *row[1:], yes]
        table.add_row(*row)
    model = report.safe_eps
    if model is not None and report.safe_eps_margin is None:  # compare: --to eps stored as 0
        line = (
            f"Safe eps (model): {_g(model, 6)}; no margin: the configured {eps_name} is 0 as "
            "its dtype stores it"
        )
    elif model is not None:
        line = (
            f"Safe eps (model): {_g(model, 6)}; margin {_margin(report.safe_eps_margin)} "
            f"decade(s) from the configured {eps_name} (negative: it already fails)"
        )
    else:
        line = f"Safe eps (model): {report.safe_eps_note}"
    if title is None:
        title = f"Safe eps: the largest eps at which every positive finite {qv} meets the bound"
    return [Text(title), NamedTable(table), Text(line + "\n")]


# ----------------------------------------------------------------------------- checks
RATIO_RULES = (
    Rule(
        "ratio/below-bound",
        "below-bound",
        "Inputs whose q/eps is below the bound, i.e. eps attenuates them by more than delta: "
        "A = sqrt(q/(q+eps)) < 1 - delta.",
    ),
    Rule(
        "ratio/nonfinite",
        "nonfinite",
        "NaN or +inf q values (each one counts as a violation).",
    ),
)


class _Shards:
    """``merge`` reports are ratio reports of shards concatenated along axis 0: a check points
    at the shard holding its worst input, and the report has no single file."""

    def __init__(self, shards: tuple[str, ...]) -> None:
        self.shards = shards

    def of(self, item: Any) -> tuple[str, str | None]:
        """`` (shard s FILE at [i, j])`` and FILE for an input of a shard, else ``""``, None
        (also for no input: None)."""
        s = getattr(item, "shard", None)
        if not self.shards or s is None:
            return "", None
        inner = list(item.shard_index or ())
        return f" (shard {s} {self.shards[s]} at {inner})", self.shards[s]


def _below_bound_check(layer: Any, report: Any, bad: Level, shards: _Shards) -> Check:
    """``ratio/below-bound``: fails when some finite q has ``q/eps < min_ratio``."""
    bound = report.min_ratio
    qv = getattr(layer, "quantity", "q")
    finite = layer.count - layer.nonfinite
    below = layer.below_bound
    nums: dict[str, Number] = {
        "eps": layer.eps,
        "count": layer.count,
        "finite": finite,
        "below_bound": below,
        "fraction": below / layer.count if layer.count else 0.0,
        "min_ratio": layer.min_ratio,
        "min_attenuation": layer.min_attenuation,
        "bound_min_ratio": bound,
        "delta": report.delta,
        "zero_vectors": layer.zero_count,
        "min_pos_q": layer.min_pos_q,
        "safe_eps": layer.safe_eps,
        "safe_eps_margin_decades": layer.safe_eps_margin,
    }
    zeros = layer.zero_count
    zero_text = ""
    if zeros and getattr(layer, "zeros_violate", False):
        below += zeros
        zero_text = f"; {zeros} zero vector(s) ({qv} = 0), each a violation"
    elif zeros:
        zero_text = f"; {zeros} zero vector(s) ({qv} = 0: output 0 under any eps) not counted"
    safe = layer.safe_eps
    safe_text = (
        f"; safe eps {_g(safe, 6)} ({_g(layer.safe_eps_margin, 3)} decades from eps)"
        if safe is not None
        else f"; safe eps {layer.safe_eps_note}"
    )
    loc: str | None = None
    if below:
        w = layer.worst[0] if layer.worst else None
        in_shard, loc = shards.of(w)
        where = f" at index {list(w.index)}{in_shard}" if w is not None else ""
        msg = (
            f"{layer.name}: {below} of {layer.count} inputs "
            f"({_g(100.0 * below / layer.count, 3)}%) have {qv}/eps below {_g(bound, 12)} "
            f"(A < {_g(1.0 - report.delta, 12)}); min {qv}/eps {_g(layer.min_ratio)} "
            f"(A = {_g(layer.min_attenuation)}){where}{zero_text}{safe_text}"
        )
    elif finite:
        msg = (
            f"{layer.name}: all {finite - zeros} finite positive inputs have {qv}/eps >= "
            f"{_g(bound, 12)}; min {qv}/eps {_g(layer.min_ratio)} "
            f"(A = {_g(layer.min_attenuation)}){zero_text}{safe_text}"
        )
    else:
        msg = f"{layer.name}: no finite {qv} value to check"
    level: Level = "note" if below == 0 else bad
    return Check("ratio/below-bound", layer.name, below == 0, level, msg, nums, loc)


def _nonfinite_check(layer: Any, bad: Level, shards: _Shards) -> Check:
    """``ratio/nonfinite``: fails when some q is NaN or +inf."""
    nf = layer.nonfinite
    nums: dict[str, Number] = {
        "count": layer.count,
        "nonfinite": nf,
        "nan": layer.nan_count,
        "inf": layer.inf_count,
    }
    loc: str | None = None
    if nf:
        first = layer.nonfinite_examples[0] if layer.nonfinite_examples else None
        in_shard, loc = shards.of(first)
        where = f", first at index {list(first.index)}{in_shard}" if first is not None else ""
        msg = (
            f"{layer.name}: {nf} nonfinite q of {layer.count} inputs "
            f"({layer.nan_count} NaN, {layer.inf_count} inf){where}"
        )
    else:
        msg = f"{layer.name}: no NaN or inf among {layer.count} q values"
    level: Level = "note" if nf == 0 else bad
    return Check("ratio/nonfinite", layer.name, nf == 0, level, msg, nums, loc)


def _safe_fact(report: Any) -> str:
    """The model's safe eps and margin, for the facts of a check report."""
    if report.safe_eps is None:
        return str(report.safe_eps_note)
    return (
        f"{_g(report.safe_eps, 6)} (margin {_g(report.safe_eps_margin, 3)} decades from the "
        "configured eps)"
    )


class RatioReporter(
    Reporter, TextRole["RatioReport"], DocumentRole["RatioReport"], ChecksRole["RatioReport"]
):
    """``ratio`` and ``merge`` (a ratio report of shards): every format; the gate decides the
    verdict and the level of a failed check."""

    def text(self, result: RatioReport) -> str:
        """The text report."""
        parts: list[Block] = []
        kind = quantity_kind(result.layers, result.raw)
        qv = quantity_label(result.layers)
        parts.append(
            Text(
                f"{_e(result.source)} ({kind}): bound A >= {_g(1 - result.delta, 12)} "
                f"(delta {_g(result.delta, 12)}) <=> {qv}/eps >= {_g(result.min_ratio, 12)}"
            )
        )
        table = Table()
        for name, justify in [
            ("layer", "left"),
            ("eps", "right"),
            ("count", "right"),
            ("nonfinite", "right"),
            ("zero", "right"),
            (f"min {qv} > 0", "right"),
            (f"min {qv}/eps", "right"),
            ("min A", "right"),
            ("below bound", "right"),
            ("violating", "right"),
        ]:
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for layer in result.layers:
            table.add_row(*_layer_row(layer), style="bold" if layer.violations else None)
        parts.append(NamedTable(table))
        parts.extend(_eps_source_parts(result))
        parts.extend(safe_eps_parts(result.layers, result, "eps"))
        parts += position_split_parts(
            result.layers,
            [
                ("n", lambda p: str(p.count)),
                ("min q/eps", lambda p: _g(p.min_ratio, 4)),
                ("max q", lambda p: _g(p.max_q, 4)),
                ("viol", lambda p: str(p.violations)),
            ],
        )
        for layer in result.layers:
            if _wants_histogram(layer, result, self.options):
                parts.extend(_histogram(layer, result.min_ratio, self.options.color))
            if not layer.violations:
                continue
            if layer.worst:  # (--top 0 lists none)
                # The title is a line of its own: a table title wraps at the table's width.
                parts.append(Text(f"{_e(layer.name)}: worst {len(layer.worst)} input(s)"))
                worst = Table()
                q = layer.quantity
                for name in ("index", q, f"{q}/eps", "A", "1 - A"):
                    worst.add_column(name, justify="left" if name == "index" else "right")
                for w in layer.worst:
                    worst.add_row(
                        _shard_index(w.index, w.shard, w.shard_index),
                        _g(w.q),
                        _g(w.ratio),
                        _g(w.attenuation),
                        _g(w.loss),
                    )
                parts.append(worst)
            if layer.nonfinite:
                shown = ", ".join(
                    f"{_shard_index(n.index, n.shard, n.shard_index)}={n.value}"
                    for n in layer.nonfinite_examples
                )
                parts.append(
                    Text(
                        f"{_e(layer.name)}: {layer.nonfinite} nonfinite {layer.quantity} "
                        f"({layer.nan_count} NaN, "
                        f"{layer.inf_count} inf), each a violation: {shown}"
                    )
                )
        parts.extend(members_parts(result))
        affected = result.layers_affected
        parts.append(
            Text(
                f"Total: {result.violations} violation(s) in {len(affected)} of "
                f"{len(result.layers)} layer(s) ({result.below_bound} below the bound, "
                f"{result.nonfinite} nonfinite{zero_part(result)}) out of {result.count} inputs"
                + (f"; layers affected: {', '.join(_e(a) for a in affected)}" if affected else "")
            )
        )
        parts.extend(tail_parts(result.skipped, self.options))
        return render_blocks(parts, self.options)

    def document(self, result: RatioReport) -> dict[str, object]:
        from rmsnorm_eps.layer_record import ratio_layer  # imports numpy

        """The ratio document (``command`` is ``merge`` for a report of shards, with ``shards``)."""
        doc = head("merge" if result.shards else "ratio")
        doc["schema_version"] = DOCUMENT_VERSION
        doc.update(
            {
                "source": result.source,
                "raw": result.raw,
                "delta": result.delta,
                "min_ratio": result.min_ratio,
                "tie_rule": "q/eps == min_ratio passes; violation when q/eps < min_ratio",
                "zero_rule": ZERO_RULE_VIOLATION if result.zero_is_violation else ZERO_RULE,
                "zero_is_violation": result.zero_is_violation,
                "top_k": result.top_k,
                "summary": {
                    "layers": len(result.layers),
                    "count": result.count,
                    "below_bound": result.below_bound,
                    "zero": result.zero_count,
                    "nonfinite": result.nonfinite,
                    "violations": result.violations,
                    "violation_fraction": result.violation_fraction,
                    "layers_affected": list(result.layers_affected),
                    **safe_eps_document(result),
                    **members_document(result),
                },
                "gate": gate_document(self.options.gate),
                "layers": [ratio_layer(layer) for layer in result.layers],
            }
        )
        if result.shards:
            doc["shards"] = list(result.shards)
        doc.update(skipped_document(result.skipped))
        return doc

    def checks(self, result: RatioReport) -> CheckReport:
        """Two checks per layer of a :class:`~rmsnorm_eps.analysis.RatioReport`.

        ``below-bound`` fails when some finite q has ``q/eps < min_ratio`` (ties pass);
        ``nonfinite`` fails when some q is NaN or +inf. A failed check is an ``error`` unless the
        gate passed within its budget (then ``warning``).
        """
        passed = (
            result.violations == 0 if self.options.gate is None else bool(self.options.gate.passed)
        )
        bad: Level = "warning" if passed else "error"
        bound = result.min_ratio
        shards: tuple[str, ...] = tuple(getattr(result, "shards", ()))
        where = _Shards(shards)
        checks: list[Check] = []
        for layer in result.layers:
            checks.append(_below_bound_check(layer, result, bad, where))
            checks.append(_nonfinite_check(layer, bad, where))
        verdict = (
            self.options.gate.reason
            if self.options.gate is not None
            else ("no violations" if passed else f"{result.violations} violation(s)")
        )
        qv = quantity_label(result.layers)
        kind = (
            quantity_kind(result.layers, result.raw, str)
            if qv != "q"
            else ("activations (q = mean(x^2) over the last axis)" if result.raw else "q values")
        )
        facts: tuple[tuple[str, str], ...] = (
            ("source", f"{result.source} ({kind})"),
            (
                "bound",
                f"A >= {_g(1.0 - result.delta, 12)} <=> {qv}/eps >= {_g(bound, 12)} "
                f"(delta {_g(result.delta, 12)})",
            ),
            ("inputs", f"{result.count} in {len(result.layers)} layer(s)"),
            (
                "violations",
                f"{result.violations} ({result.below_bound} below the bound, "
                f"{result.nonfinite} nonfinite{zero_part(result)}) in "
                f"{len(result.layers_affected)} layer(s)",
            ),
            ("safe eps", _safe_fact(result)),
            ("verdict", ("PASS: " if passed else "FAIL: ") + verdict),
        )
        command = "merge" if shards else "ratio"
        if shards:
            facts = (facts[0], ("shards", ", ".join(shards)), *facts[1:])
        checked = CheckReport(
            command=command,
            title=f"rmsnorm-eps {command}: {result.source}",
            source=None if shards else result.source,
            subject="layer",
            rules=RATIO_RULES,
            checks=tuple(checks),
            passed=passed,
            verdict=verdict,
            facts=facts,
        )
        return with_skipped(checked, tuple(getattr(result, "skipped", ())))

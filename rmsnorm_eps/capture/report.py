"""Reports of a capture: the ratio report of a summary-only capture, and the capture's own
document (per module: live eps, dim, dtype, gain, count, min q/eps) in text and JSON."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rmsnorm_eps.analysis import RatioReport, layer_result
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.hooks import CaptureResult, ModuleRecord
from rmsnorm_eps.capture.output import module_facts

__all__ = ["capture_document", "not_analysed", "render_capture_text", "summary_report"]


def not_analysed(result: CaptureResult) -> list[str]:
    """One line per hooked module whose kind is unknown (never analysed), with the reason."""
    return [
        f"not analysed: {m.name} ({m.class_name}): unknown norm kind: {m.reason}"
        for m in result.modules
        if m.norm == "unknown"
    ]


def summary_report(result: CaptureResult, delta: float, source: str) -> RatioReport:
    """The ``ratio`` report of a summary-only capture: one layer per module that ran, shape
    (N,), the float32 q values the dump would hold, with its first-token / other-token split.

    It is what ``ratio`` reports on the full dump (same counts, minima, worst inputs with the
    same indices, histograms), and :func:`rmsnorm_eps.merge.write_summary` writes it in the
    mergeable summary format that ``rmsnorm-eps merge`` reads.
    """
    if not result.summary_only or result.min_ratio is None:
        raise CaptureError("not a summary-only capture")
    layers = []
    for m in result.modules:
        s = m.summaries
        if not s or s["all"].count == 0:
            continue
        first, other, whole = (
            layer_result(
                s[stream],
                name=name,
                shape=(s["all"].count,),
                order="C",
                dtype="float32",
                raw_dim=None,
            )
            for stream, name in (
                ("first", f"{m.name} (first token)"),
                ("other", f"{m.name} (other tokens)"),
                ("all", m.name),
            )
        )
        layers.append(replace(whole, first_token=first, other_tokens=other))
    if not layers:
        raise CaptureError("no norm module saw a token: nothing was captured")
    return RatioReport(
        source=source,
        raw=False,
        delta=delta,
        min_ratio=result.min_ratio,
        top_k=result.top_k,
        layers=tuple(layers),
    )


def _min_ratio(m: ModuleRecord) -> float | None:
    if m.eps is None or m.eps == 0:
        return None
    if m.q is not None and m.q.size:
        finite = m.q[~(m.q != m.q)]  # drop NaN
        return float(finite.min()) / m.eps if finite.size else None
    if m.summaries:
        acc = m.summaries["all"]
        return acc.min_q / m.eps if math.isfinite(acc.min_q) else None
    return None


def capture_document(
    result: CaptureResult, model: str, outputs: dict[str, str | None]
) -> dict[str, Any]:
    """The capture's JSON document (schema_version 1)."""
    from rmsnorm_eps import __version__

    return {
        "schema_version": 1,
        "tool": "rmsnorm-eps",
        "version": __version__,
        "command": "capture",
        "model": model,
        "outputs": outputs,
        "sequences": result.sequences,
        "tokens": result.tokens,
        "summary_only": result.summary_only,
        "q_dtype": result.q_dtype,
        "modules": [{**module_facts(m), "min_ratio": _min_ratio(m)} for m in result.modules],
    }


def render_capture_text(doc: dict[str, Any], width: int) -> str:
    """A table of the hooked modules and their live settings."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from rmsnorm_eps.reports import RenderOptions
    from rmsnorm_eps.reports.text import fmt, render_renderables

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    names = ("module", "norm", "eps", "dim", "dtype", "gain", "layout", "inputs", "min q/eps")
    for name in names:
        table.add_column(name, justify="left" if name in ("module", "layout") else "right")
    for m in doc["modules"]:
        table.add_row(
            m["name"],
            m.get("norm") or "-",
            fmt(m["eps"], 8),
            str(m["dim"] or "-"),
            m["input_dtype"] or "-",
            m["gain"],
            (m["layout"] or "-").split(" ")[0],
            str(m["count"]),
            fmt(m["min_ratio"]),
        )
    eps_values = sorted({m["eps"] for m in doc["modules"] if m["eps"] is not None})
    head = Text(
        f"{doc['model']}: {len(doc['modules'])} norm modules, {doc['sequences']} "
        f"text(s), {doc['tokens']} tokens; live eps: " + ", ".join(repr(e) for e in eps_values)
    )
    written = [f"{k}: {v}" for k, v in doc["outputs"].items() if v]
    parts: list[Any] = [head, table]
    for m in doc["modules"]:
        if m.get("norm") == "unknown":
            parts.append(
                Text(f"not analysed: {m['name']} ({m['class']}): unknown norm kind: {m['reason']}")
            )
    if any(m.get("norm") == "layer" for m in doc["modules"]):
        parts.append(Text("q of a LayerNorm is v = mean((x - mean x)^2), its variance"))
    if written:
        parts.append(Text("wrote " + "; ".join(written)))
    return render_renderables(parts, RenderOptions(width=width))

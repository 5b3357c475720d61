"""Reports of a capture: the ratio report of a summary-only capture, and the capture's own
document (per module: live eps, dim, dtype, gain, count, min q/eps) in text and JSON."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rmsnorm_eps.analysis import LayerResult, NonfiniteInput, RatioReport, layer_result
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.hooks import CaptureResult, ModuleRecord
from rmsnorm_eps.capture.output import module_facts
from rmsnorm_eps.capture.summaries import TrackedSummary

__all__ = ["capture_document", "render_capture_text", "summary_report"]


def _layer(name: str, s: TrackedSummary, dtype: str, heads: int) -> LayerResult:
    """A LayerResult from a stream summary; indices are [sequence, position(, head)]."""
    res = layer_result(s.acc, name=name, shape=(s.acc.count,), order="C", dtype=dtype, raw_dim=None)

    def origin(i: int) -> tuple[int, ...]:
        b, p, h = s.where[i]
        return (b, p, h) if heads > 1 else (b, p)

    worst = tuple(
        replace(w, index=origin(int(i)))
        for w, i in zip(res.worst, s.acc.worst_index.tolist(), strict=True)
    )
    nonfinite = tuple(
        NonfiniteInput(origin(i), v)
        for i, v in zip(s.acc.nonfinite_index, s.acc.nonfinite_value, strict=True)
    )
    return replace(res, worst=worst, nonfinite_examples=nonfinite)


def summary_report(result: CaptureResult, delta: float, source: str) -> RatioReport:
    """The ``ratio`` report of a summary-only capture (first token and other tokens split)."""
    if not result.summary_only or result.min_ratio is None:
        raise CaptureError("not a summary-only capture")
    layers = []
    for m in result.modules:
        if not m.summaries or m.summaries["all"].acc.count == 0:
            continue
        s = m.summaries
        first = _layer(f"{m.name} (first token)", s["first"], result.q_dtype, m.heads)
        other = _layer(f"{m.name} (other tokens)", s["other"], result.q_dtype, m.heads)
        whole = _layer(m.name, s["all"], result.q_dtype, m.heads)
        layers.append(replace(whole, first_token=first, other_tokens=other))
    if not layers:
        raise CaptureError("no norm module saw a token: nothing was captured")
    top_k = max((len(ly.worst) for ly in layers), default=0)
    return RatioReport(
        source=source,
        raw=False,
        delta=delta,
        min_ratio=result.min_ratio,
        top_k=top_k,
        layers=tuple(layers),
    )


def _min_ratio(m: ModuleRecord) -> float | None:
    if m.eps is None or m.eps == 0:
        return None
    if m.q is not None and m.q.size:
        finite = m.q[~(m.q != m.q)]  # drop NaN
        return float(finite.min()) / m.eps if finite.size else None
    if m.summaries:
        acc = m.summaries["all"].acc
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
    for name in ("module", "eps", "dim", "dtype", "gain", "layout", "inputs", "min q/eps"):
        table.add_column(name, justify="left" if name in ("module", "layout") else "right")
    for m in doc["modules"]:
        table.add_row(
            m["name"],
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
    if written:
        parts.append(Text("wrote " + "; ".join(written)))
    return render_renderables(parts, RenderOptions(width=width))

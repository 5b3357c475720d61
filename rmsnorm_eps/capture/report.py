"""Reports of a capture: the ratio report of a summary-only capture, and the capture's own
document (per module: live eps, dim, dtype, gain, count, min q/eps), rendered by
:mod:`rmsnorm_eps.reports.commands.capture` in every format."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from rmsnorm_eps.analysis import RatioReport
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.output import module_facts
from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord
from rmsnorm_eps.layer_record import layer_result

__all__ = ["CaptureReport", "capture_document", "not_analysed", "summary_report"]


@dataclass(frozen=True)
class CaptureReport:
    """What ``rmsnorm-eps capture`` reports (without --summary-only): the capture, the model's
    name and the files written (``{"dump": path, "config": path or None}``)."""

    command: ClassVar[str] = "capture"

    result: CaptureResult
    model: str
    outputs: dict[str, str | None]
    #: the capture document when it was built elsewhere (reduced over torchrun ranks); else
    #: the reporter builds it from ``result``
    document: dict[str, Any] | None = None


def not_analysed(result: CaptureResult) -> list[str]:
    """One line per hooked module never analysed (its kind, or its layout, unknown, or a call
    it failed), with the reason."""
    return [
        f"not analysed: {m.name} ({m.class_name}): {why_not_analysed(m.reason)}"
        for m in result.modules
        if m.norm == "unknown"
    ]


def why_not_analysed(reason: str | None) -> str:
    """Why a module was not analysed, from its record's ``reason``: its kind is unknown, or
    (the reason starts ``not analysed``) its kind is known but its layout or a call was not."""
    why = str(reason or "-")
    if why.startswith("not analysed"):
        return why.removeprefix("not analysed").lstrip(": ")
    return f"unknown norm kind: {why}"


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
        positive = m.q[m.q > 0]  # NaN and zero vectors (output 0 under any eps) dropped
        return float(positive.min()) / m.eps if positive.size else None
    if m.summaries:
        acc = m.summaries["all"]
        return acc.min_pos_q / m.eps if math.isfinite(acc.min_pos_q) else None
    return None


def capture_document(
    result: CaptureResult, model: str, outputs: dict[str, str | None]
) -> dict[str, Any]:
    """The capture's JSON document (schema_version 1)."""
    from rmsnorm_eps._version import __version__

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

"""``capture`` reports (without --summary-only; a summary-only capture is a ratio report):
per hooked norm module the live eps, dim, dtype, gain, inputs seen and min q/eps.

All six formats: a capture reports findings, one check per module (``capture/ran``: the
module saw at least one token; a hooked module that never ran has no live eps, so a config
written from the capture lacks it). A failed check is a ``warning``: capture itself never
fails on it (exit 0), the CI formats surface it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmsnorm_eps.capture.report import why_not_analysed
from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.jsonvalues import jnum
from rmsnorm_eps.reports.checks import Check, CheckReport, Number, Rule
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.capture.report import CaptureReport

__all__ = ["CAPTURE_RULES", "CaptureReporter"]


CAPTURE_RULES = (
    Rule(
        "capture/ran",
        "ran",
        "Every hooked norm module must see at least one token: a module that never ran has no "
        "live eps and no q values (a warning: the capture itself succeeds).",
        "warning",
    ),
    Rule(
        "capture/kind",
        "known norm kind",
        "Every hooked module must compute a known norm (RMSNorm, LayerNorm, gated RMSNorm, "
        "L2): a module of unknown kind is listed and never analysed as if it were RMSNorm.",
        "warning",
    ),
)


def _document(result: CaptureReport) -> dict[str, Any]:
    """The capture document (schema_version 1); a min q/eps that is not finite is written as
    a string ("inf"), as every document writes it."""
    from rmsnorm_eps.capture.report import capture_document

    doc = result.document or capture_document(result.result, result.model, result.outputs)
    doc = {**doc}
    doc["modules"] = [{**m, "min_ratio": jnum(m["min_ratio"])} for m in doc["modules"]]
    return doc


class CaptureReporter(
    Reporter, TextRole["CaptureReport"], DocumentRole["CaptureReport"], ChecksRole["CaptureReport"]
):
    """``capture``: every format."""

    def text(self, result: CaptureReport) -> str:
        """A table of the hooked modules and their live settings."""
        from rmsnorm_eps.reports.blocks import NamedTable, Table, Text
        from rmsnorm_eps.reports.formats.text import render_blocks

        doc = _document(result)
        table = Table()
        names = ("module", "norm", "eps", "dim", "dtype", "gain", "layout", "inputs", "min q/eps")
        for name in names:
            table.add_column(name, justify="left" if name in ("module", "layout") else "right")
        for m in doc["modules"]:
            ratio = m["min_ratio"]
            table.add_row(
                Text(_e(m["name"])),
                Text(_e(m.get("norm") or "-")),
                _g(m["eps"], 8),
                str(m["dim"] or "-"),
                Text(_e(m["input_dtype"] or "-")),
                Text(_e(m["gain"])),
                Text(_e((m["layout"] or "-").split(" ")[0])),
                str(m["count"]),
                ratio if isinstance(ratio, str) else _g(ratio),
            )
        eps_values = sorted({m["eps"] for m in doc["modules"] if m["eps"] is not None})
        head = Text(
            f"{_e(doc['model'])}: {len(doc['modules'])} norm modules, {doc['sequences']} "
            f"text(s), {doc['tokens']} tokens; live eps: " + ", ".join(repr(e) for e in eps_values)
        )
        written = [f"{k}: {_e(v)}" for k, v in doc["outputs"].items() if v]
        parts: list[Any] = [head, NamedTable(table, noun="modules")]
        for m in doc["modules"]:
            if m.get("norm") == "unknown":
                parts.append(
                    Text(
                        f"not analysed: {_e(m['name'])} ({_e(m['class'])}): "
                        f"{_e(why_not_analysed(m.get('reason')))}"
                    )
                )
        if any(m.get("norm") == "layer" for m in doc["modules"]):
            parts.append(Text("q of a LayerNorm is v = mean((x - mean x)^2), its variance"))
        if written:
            parts.append(Text("wrote " + "; ".join(written)))
        return render_blocks(parts, self.options)

    def document(self, result: CaptureReport) -> dict[str, object]:
        return _document(result)

    def checks(self, result: CaptureReport) -> CheckReport:
        """One ``capture/ran`` check per hooked module (a warning when it saw no token)."""
        doc = _document(result)
        out: list[Check] = []
        for m in doc["modules"]:
            ran = m["count"] > 0
            nums: dict[str, Number] = {
                k: m[k] for k in ("eps", "dim", "count", "calls", "min_ratio")
            }
            ratio = m["min_ratio"]
            shown = ratio if isinstance(ratio, str) else _g(ratio)
            msg = (
                f"{m['name']}: {m['count']} inputs, live eps {_g(m['eps'], 8)}, min q/eps {shown}"
                if ran
                else f"{m['name']}: never ran (no token reached it): no live eps, no q values"
            )
            out.append(
                Check("capture/ran", m["name"], ran, "note" if ran else "warning", msg, nums)
            )
            if m.get("norm") == "unknown":
                why = f"{m['name']}: not analysed: {why_not_analysed(m.get('reason'))}"
                out.append(Check("capture/kind", m["name"], False, "warning", why, {}))
        idle = sum(1 for c in out if not c.passed and c.rule == "capture/ran")
        unknown = sum(1 for c in out if c.rule == "capture/kind")
        ran_total = len(doc["modules"])
        verdict = (
            f"{ran_total} norm module(s) captured"
            if not idle
            else f"{ran_total - idle} of {ran_total} norm module(s) ran; {idle} never ran"
        ) + (f"; {unknown} of unknown kind (not analysed)" if unknown else "")
        written = "; ".join(f"{k}: {v}" for k, v in doc["outputs"].items() if v)
        return CheckReport(
            command="capture",
            title=f"rmsnorm-eps capture: {doc['model']}",
            source=doc["outputs"].get("dump") or doc["outputs"].get("summary"),
            subject="module",
            rules=CAPTURE_RULES,
            checks=tuple(out),
            passed=True,
            verdict=verdict,
            facts=(
                ("model", str(doc["model"])),
                ("texts", f"{doc['sequences']} text(s), {doc['tokens']} tokens"),
                ("written", written or "-"),
                ("verdict", "PASS: " + verdict),
            ),
        )

"""``probe`` reports: what a probe set holds (metadata and, per category, the rows and the
q/eps range): the document and the text table. It checks nothing (text and json only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.jsonvalues import head as _head
from rmsnorm_eps.jsonvalues import jnum as _jnum
from rmsnorm_eps.reports.blocks import Block, Table, Text
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.formats.text import render_blocks
from rmsnorm_eps.reports.interface import DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.parity.probe_set import ProbeSet
    from rmsnorm_eps.parity.probes import ProbeSummary

__all__ = ["ProbeReporter", "probe_document"]


def probe_document(probes: ProbeSet, path: str | None = None) -> dict[str, Any]:
    """What a probe set holds: metadata and, per category, rows and the q/eps range."""
    import numpy as np

    from rmsnorm_eps.parity.probe_set import CATEGORIES

    doc = _head("probe")
    doc.update(
        {
            "path": path,
            **{k: v for k, v in probes.metadata().items() if k not in ("tool", "version")},
        }
    )
    doc["rows"] = probes.count
    cats = []
    for name in CATEGORIES:
        rows = probes.rows(name)
        if rows.size == 0:
            continue
        ratio = probes.q[rows] / probes.eps
        cats.append(
            {
                "name": name,
                "rows": int(rows.size),
                "min_ratio": _jnum(float(np.min(ratio))),
                "max_ratio": _jnum(float(np.max(ratio))),
            }
        )
    doc["categories"] = cats
    return doc


def probe_parts(probes: ProbeSet, path: str | None) -> list[Block]:
    doc = probe_document(probes, path)
    head = (
        f"{probes.count} probes, d={probes.dim}, dtype {probes.dtype}, eps {probes.eps!r}, "
        f"gain {_e(probes.gain_kind)} (convention {probes.gain_convention}), seed {probes.seed}"
    )
    q = "q"
    if probes.norm == "layer":  # LayerNorm: categories by v = mean((x - mean x)^2)
        q = "v"
        head += f", LayerNorm (bias {_e(probes.bias_kind or 'given')}; v = variance)"
    if path:
        head += f" -> {_e(path)}"
    table = Table()
    for name, justify in [
        ("category", "left"),
        ("rows", "right"),
        (f"min {q}/eps", "right"),
        (f"max {q}/eps", "right"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in doc["categories"]:
        table.add_row(
            _e(c["name"]), str(c["rows"]), _fmt_ratio(c["min_ratio"]), _fmt_ratio(c["max_ratio"])
        )
    return [Text(head), table]


def _fmt_ratio(value: object) -> str:
    return value if isinstance(value, str) else _g(value, 4)  # type: ignore[arg-type]


class ProbeReporter(Reporter, TextRole["ProbeSummary"], DocumentRole["ProbeSummary"]):
    """``probe``: text and json."""

    def text(self, result: ProbeSummary) -> str:
        """The text report."""
        return render_blocks(probe_parts(result.probes, result.path), self.options)

    def document(self, result: ProbeSummary) -> dict[str, object]:
        """The probe document of a probe summary."""
        return probe_document(result.probes, result.path)

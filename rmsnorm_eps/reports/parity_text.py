"""Text rendering of the probe summary and the parity result (rich tables, no colour needed)."""

from __future__ import annotations

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from rmsnorm_eps.parity.api import ParityResult
from rmsnorm_eps.parity.infer import Inference
from rmsnorm_eps.parity.probes import ProbeSet, ProbeSummary
from rmsnorm_eps.reports import RenderOptions, UnsupportedResult
from rmsnorm_eps.reports.parity_document import probe_document

__all__ = ["eps_summary", "parity_parts", "probe_parts", "render_parity"]


def render_parity(result: object, options: RenderOptions) -> str:
    """Text for a :class:`ParityResult` or a :class:`ProbeSummary`."""
    from rmsnorm_eps.reports.text import render_renderables

    if isinstance(result, ParityResult):
        return render_renderables(parity_parts(result), options)
    if isinstance(result, ProbeSummary):
        return render_renderables(probe_parts(result.probes, result.path), options)
    raise UnsupportedResult(f"text format cannot render {type(result).__name__}")


def _g(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def probe_parts(probes: ProbeSet, path: str | None) -> list[RenderableType]:
    doc = probe_document(probes, path)
    head = (
        f"{probes.count} probes, d={probes.dim}, dtype {probes.dtype}, eps {probes.eps!r}, "
        f"gain {probes.gain_kind} (convention {probes.gain_convention}), seed {probes.seed}"
    )
    if path:
        head += f" -> {path}"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name, justify in [
        ("category", "left"),
        ("rows", "right"),
        ("min q/eps", "right"),
        ("max q/eps", "right"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in doc["categories"]:
        table.add_row(
            c["name"], str(c["rows"]), _fmt_ratio(c["min_ratio"]), _fmt_ratio(c["max_ratio"])
        )
    return [Text(head), table]


def eps_summary(inf: Inference) -> str:
    """``1.19209e-07 +- 6.5e-07 relative (1 sigma), 0.1192x configured 1e-06``."""
    if inf.eps is None:
        return "none"
    text = f"{inf.eps:.6g}"
    if inf.rel_uncertainty is not None:
        text += f" +- {inf.rel_uncertainty:.2g} relative (1 sigma)"
    return text + f", {inf.eps / inf.configured_eps:.4g}x configured {inf.configured_eps!r}"


def _fmt_ratio(value: object) -> str:
    return value if isinstance(value, str) else _g(value)  # type: ignore[arg-type]


def parity_parts(result: ParityResult) -> list[RenderableType]:
    p, inf, tol = result.probes, result.inference, result.tolerance
    parts: list[RenderableType] = [
        Text(f"outputs {result.actual_source} ({result.output_dtype})"),
        Text(f"probes  {result.probe_source} ({p.dtype}, d={p.dim}, {p.count} rows)"),
        Text(f"configured eps {p.eps!r}, gain {p.gain_kind} (convention {p.gain_convention})"),
        Text(f"rule {tol.rule}: {tol.formula()}; atol {tol.atol!r}, rtol {tol.rtol!r}"),
        Text(f"({tol.source}); nonfinite values checked separately"),
    ]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in (
        "category",
        "rows",
        "failing",
        "max abs err",
        "max rel err",
        "min atol",
        "min rtol",
        "nonfinite",
        "result",
    ):
        table.add_column(name, justify="left" if name in ("category", "result") else "right")
    for c in result.categories:
        table.add_row(
            c.name,
            str(c.rows),
            f"{c.failing}/{c.elements}",
            _g(c.max_abs_error),
            _g(c.max_rel_error),
            _g(c.min_atol),
            _g(c.min_rtol),
            str(c.nan + c.inf),
            "pass" if c.passed else "FAIL",
            style=None if c.passed else "bold",
        )
    parts.append(table)
    eps_line = f"inferred eps {eps_summary(inf)}; "
    eps_line += f"placement {inf.placement}" + (f" ({inf.note})" if inf.note else "")
    eps_line += f"; gain {inf.gain.kind}"
    if inf.gain.factor is not None and inf.gain.kind != "match":
        eps_line += f" (median channel factor {inf.gain.factor:.4g})"
    parts.append(Text(eps_line))
    parts.append(Text(result.diagnosis))
    return parts

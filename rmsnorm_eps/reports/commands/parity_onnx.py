"""``parity onnx`` reports: each norm of an ONNX graph, its stored eps, the configured eps
(``--config``) and the effective eps and placement onnxruntime runs with (measured on the
probes): the document, the text (one block of lines per norm), and one check per norm for the
CI formats (a norm whose effective eps differs from the stored or configured one beyond the
relative tolerance, or that stores no eps or a schema default, fails; a norm that was not
measured fails too, unless ``--allow-skipped`` made it a warning)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.jsonvalues import head as _head
from rmsnorm_eps.reports.checks import Check, CheckReport, Level, Number, Rule, verdict_fact
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.parity.onnx_runtime import NormMeasurement, OnnxParityReport

__all__ = ["OnnxParityReporter", "norm_line", "skipped_line"]

_MEASURED = Rule(
    "parity-onnx/measured",
    "norm measured",
    "Every norm the graph holds must be measured by onnxruntime; a norm that could not be "
    "(inside an If or Loop branch, its weight a graph input, refused by onnxruntime, its "
    "dimension unknown, over a limit) fails unless --allow-skipped is given.",
)
_RULE = Rule(
    "parity-onnx/effective-eps",
    "effective eps",
    "The eps onnxruntime runs with (fitted to its outputs on the probes) must be within the "
    "relative tolerance of the eps the graph stores and of the configured one (--config), at "
    "the stored placement; a norm storing no eps or its op's schema default fails.",
)


def _eps(value: float | None) -> str:
    return "none" if value is None else repr(value)


def norm_line(n: NormMeasurement) -> str:
    """One line: name, stored, configured, effective (with its range), placement, verdict."""
    configured = "" if n.configured is None else f"; configured {_eps(n.configured)}"
    effective = (
        f"effective {_g(n.effective)} [{_g(n.effective_low)}, {_g(n.effective_high)}]"
        if n.effective is not None
        else f"effective not measured ({n.note})"
    )
    verdict = "OK" if n.agrees else "DIFFERENT: " + "; ".join(n.findings)
    return (
        f"{n.name}: stored {_eps(n.stored)}{configured}; {effective}; placement "
        f"{n.placement} (graph {n.placement_stored}); {n.dtype}: {verdict}"
    )


def _norm_doc(n: NormMeasurement) -> dict[str, Any]:
    return {
        "name": n.name,
        "op": n.op,
        "stored_eps": n.stored,
        "stored_where": n.stored_where,
        "configured_eps": n.configured,
        "configured_from": n.configured_from,
        "probe_eps": n.probe_eps,
        "effective_eps": n.effective,
        "effective_eps_low": n.effective_low,
        "effective_eps_high": n.effective_high,
        "placement_stored": n.placement_stored,
        "placement": n.placement,
        "dtype": n.dtype,
        "rows_used": n.rows_used,
        "note": n.note or None,
        "agrees": n.agrees,
        "findings": list(n.findings),
    }


def _verdict(r: OnnxParityReport) -> str:
    if not r.norms:
        return "no norm measured" + (f" ({len(r.skipped)} skipped)" if r.skipped else "")
    unmeasured = ""
    if r.skipped and not r.allow_skipped:
        unmeasured = f"{len(r.skipped)} norm(s) not measured (--allow-skipped accepts that)"
        if not r.findings:
            return unmeasured
        unmeasured = "; " + unmeasured
    if r.findings:
        return (
            f"{r.findings} of {len(r.norms)} norm(s) run a different eps than stored or "
            f"configured{unmeasured}"
        )
    extra = f" ({len(r.skipped)} skipped, allowed)" if r.skipped else ""
    return f"every norm's effective eps within {100 * r.rel_tol:g}% of the stored eps{extra}"


def skipped_line(r: OnnxParityReport, name: str, why: str) -> str:
    """One line for a norm that was not measured."""
    return f"skipped {name}: {why}" + (" (allowed)" if r.allow_skipped else "")


class OnnxParityReporter(
    Reporter,
    TextRole["OnnxParityReport"],
    DocumentRole["OnnxParityReport"],
    ChecksRole["OnnxParityReport"],
):
    """``parity onnx``: every format."""

    def text(self, result: OnnxParityReport) -> str:
        from rmsnorm_eps.escape import no_ci_command

        lines = [
            f"{result.path}: {len(result.norms)} norm(s) measured by {result.optimization}; "
            f"eps relative tolerance {result.rel_tol:g}",
        ]
        if result.config:
            lines.append(f"configured eps from {result.config}")
        if result.optimized_out:
            lines.append(f"onnxruntime's optimized model saved to {result.optimized_out}")
        lines += [norm_line(n) for n in result.norms]
        lines += [skipped_line(result, s.name, s.why) for s in result.skipped]
        lines.append(("PASS: " if result.passed else "FAIL: ") + _verdict(result))
        return no_ci_command("".join(f"{_e(line)}\n" for line in lines))

    def document(self, result: OnnxParityReport) -> dict[str, object]:
        doc = _head("parity onnx")
        doc.update(
            {
                "path": result.path,
                "config": result.config,
                "optimized_out": result.optimized_out,
                "runtime": result.optimization,
                "rel_tol": result.rel_tol,
                "allow_skipped": result.allow_skipped,
                "passed": result.passed,
                "norms": [_norm_doc(n) for n in result.norms],
                "skipped": [{"name": s.name, "why": s.why} for s in result.skipped],
            }
        )
        return doc

    def checks(self, result: OnnxParityReport) -> CheckReport:
        """One check per measured norm (see the module docstring)."""
        made = []
        for n in result.norms:
            nums: dict[str, Number] = {
                "stored_eps": n.stored,
                "configured_eps": n.configured,
                "effective_eps": n.effective,
                "rel_tol": result.rel_tol,
            }
            made.append(Check(_RULE.id, n.name, n.agrees, "error", norm_line(n), nums))
        level: Level = "warning" if result.allow_skipped else "error"
        for s in result.skipped:
            line = skipped_line(result, s.name, s.why)
            made.append(Check(_MEASURED.id, s.name, False, level, line))
        facts = (
            ("model", result.path),
            ("runtime", result.optimization),
            ("measured", f"{len(result.norms)} norm(s), {len(result.skipped)} skipped"),
            verdict_fact(result.passed, _verdict(result)),
        )
        return CheckReport(
            command="parity-onnx",
            title=f"rmsnorm-eps parity onnx: {result.path}",
            source=result.path,
            subject="norm",
            rules=(_RULE, _MEASURED),
            checks=tuple(made),
            passed=result.passed,
            verdict=_verdict(result),
            facts=facts,
        )

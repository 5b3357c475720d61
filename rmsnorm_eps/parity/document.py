"""The parity document: a parity result as plain values, fixed key order, unrounded numbers,
no timestamp unless one is given. It is both the acceptance record (:mod:`.record`) and the
``parity --format json`` report."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rmsnorm_eps.jsonvalues import head as _head
from rmsnorm_eps.jsonvalues import jnum as _jnum

if TYPE_CHECKING:
    from rmsnorm_eps.parity.api import ParityResult

__all__ = ["NONFINITE_RULE", "parity_document"]

NONFINITE_RULE = "checked separately: NaN always fails; inf passes only against the same inf"


def parity_document(result: ParityResult, timestamp: str | None = None) -> dict[str, Any]:
    """The parity result as the acceptance record."""
    p, inf, tol = result.probes, result.inference, result.tolerance
    from rmsnorm_eps.parity.probe_set import LAYERNORM_REFERENCE_NAME, REFERENCE_NAME

    doc = _head("parity")
    if timestamp is not None:
        doc["generated_at"] = timestamp
    doc.update(
        {
            "verdict": "pass" if result.passed else "fail",
            "diagnosis": result.diagnosis,
            "norm": p.norm,
            "dimension": p.dim,
            "normalization_axis": "last (-1)",
            "input_dtype": p.dtype,
            "gain_dtype": p.dtype,
            "gain": p.gain_kind,
            "gain_convention": p.gain_convention,
            "output_dtype": result.output_dtype,
            "judged_dtype": result.judged_dtype,
            "configured_eps": p.eps,
            "inferred_eps": _jnum(inf.eps),
            "inferred_eps_interval": [_jnum(inf.eps_low), _jnum(inf.eps_high)],
            "placement": inf.placement,
            "reference": LAYERNORM_REFERENCE_NAME if p.norm == "layer" else REFERENCE_NAME,
            "probes": {
                "source": result.probe_source,
                "sha256": result.probe_sha256,
                "seed": p.seed,
                "rows": p.count,
                "delta": p.delta,
                "bound_ratio": p.bound_ratio,
                "tool_version": p.version,
            },
            "implementation": {"source": result.actual_source, "sha256": result.actual_sha256},
            "error_rule": {
                "rule": tol.rule,
                "formula": tol.formula(),
                "atol": tol.atol,
                "rtol": tol.rtol,
                "thresholds_from": tol.source,
                "nonfinite": NONFINITE_RULE,
            },
            "inference": {
                "eps": _jnum(inf.eps),
                "eps_low": _jnum(inf.eps_low),
                "eps_high": _jnum(inf.eps_high),
                "rel_uncertainty": _jnum(inf.rel_uncertainty),
                "eps_ratio": _jnum(inf.eps_ratio),
                "matches_configured": inf.eps_matches,
                "placement": inf.placement,
                "note": inf.note,
                "rows_used": inf.rows_used,
                "attenuated_rows": inf.attenuated_rows,
                "rounding_of": inf.uncertainty_dtype,
                "fits": [dataclasses.asdict(f) for f in inf.fits],  # in PlacementFit's field order
                "gain": {
                    "finding": inf.gain.kind,
                    "median_factor": _jnum(inf.gain.factor),
                    "deviation": _jnum(inf.gain.deviation),
                    "channels": list(inf.gain.channels),
                },
            },
            "categories": [
                {
                    "name": c.name,
                    "passed": c.passed,
                    "rows": c.rows,
                    "elements": c.elements,
                    "failing": c.failing,
                    "fraction_failing": c.fraction_failing,
                    "failing_rows": c.failing_rows,
                    "nan": c.nan,
                    "inf": c.inf,
                    "max_abs_error": _jnum(c.max_abs_error),
                    "max_rel_error": _jnum(c.max_rel_error),
                    "min_atol": _jnum(c.min_atol),
                    "min_rtol": _jnum(c.min_rtol),
                }
                for c in result.categories
            ],
            "summary": {
                "categories": len(result.categories),
                "failing_categories": list(result.failing_categories),
                "failing_elements": result.failing_elements,
                "nonfinite": result.nonfinite,
            },
        }
    )
    return doc

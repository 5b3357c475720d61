"""Canonical documents (schema_version 1) for ``compare`` and ``precision`` results."""

from __future__ import annotations

from typing import Any

from rmsnorm_eps.analysis import GateResult
from rmsnorm_eps.compare.analysis import CompareLayer, CompareReport, MovedInput
from rmsnorm_eps.compare.precision import PrecisionReport
from rmsnorm_eps.compare.spec import EpsSpec, LayerSpecs

__all__ = ["compare_document", "supports"]


def supports(result: object) -> bool:
    return isinstance(result, (CompareReport, PrecisionReport))


def _side(side: EpsSpec | LayerSpecs) -> dict[str, Any]:
    """One SPEC, or for ``config`` the config file (each layer's ``from``/``to`` has its own)."""
    if isinstance(side, LayerSpecs):
        return {"text": side.text, "config": side.config, "per_layer": True}
    return _spec(side)


def _spec(spec: EpsSpec) -> dict[str, Any]:
    return {
        "text": spec.text,
        "eps": spec.eps,
        "placement": spec.placement,
        "dim": spec.dim,
        "dtype": spec.dtype,
        "framework": spec.framework,
        "input_dtype": spec.input_dtype,
        "note": spec.note,
    }


def _moved(m: MovedInput, jnum: Any) -> dict[str, Any]:
    return {
        "index": list(m.index),
        "q": jnum(m.q),
        "ratio": jnum(m.ratio),
        "factor": jnum(m.factor),
        "change": jnum(m.change),
    }


def _layer(layer: CompareLayer, jnum: Any) -> dict[str, Any]:
    doc = {
        "name": layer.name,
        "from": _spec(layer.spec_from),
        "to": _spec(layer.spec_to),
        "shape": list(layer.shape),
        "dtype": layer.dtype,
        "raw_dim": layer.raw_dim,
        "count": layer.count,
        "nan": layer.nan_count,
        "inf": layer.inf_count,
        "zero": layer.zero_count,
        "nonfinite_factor": layer.nonfinite_factor,
        "moved": layer.moved,
        "violations": layer.violations,
        "violation_fraction": layer.violation_fraction,
        "max_abs_change": jnum(layer.max_abs_change),
        "min_factor": jnum(layer.min_factor),
        "max_factor": jnum(layer.max_factor),
        "worst": [_moved(m, jnum) for m in layer.worst],
        "nonfinite_examples": [_moved(m, jnum) for m in layer.nonfinite_examples],
        "decades": [
            {
                "decade": d.decade,
                "count": d.count,
                "moved": d.moved,
                "max_abs_change": jnum(d.max_abs_change),
            }
            for d in layer.decades
        ],
    }
    if layer.first_token is not None and layer.other_tokens is not None:
        # dumps with token positions: position 0 and the others, with the same keys as the
        # layer (their indices are indices of the whole layer)
        doc["first_token"] = _layer(layer.first_token, jnum)
        doc["other_tokens"] = _layer(layer.other_tokens, jnum)
    return doc


def compare_document(
    result: object, gate: GateResult | None, head: Any, gate_doc: Any, jnum: Any
) -> dict[str, Any]:
    """The document of a compare or precision result (helpers passed in by document.py)."""
    if isinstance(result, CompareReport):
        doc: dict[str, Any] = head("compare")
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
                "top_k": result.top_k,
                "summary": {
                    "layers": len(result.layers),
                    "count": result.count,
                    "moved": result.moved,
                    "nonfinite": result.nonfinite,
                    "violations": result.violations,
                    "violation_fraction": result.violation_fraction,
                    "max_abs_change": jnum(result.max_abs_change),
                    "layers_affected": list(result.layers_affected),
                },
                "gate": gate_doc(gate),
                "layers": [_layer(layer, jnum) for layer in result.layers],
            }
        )
        from rmsnorm_eps.reports.document import skipped_document

        doc.update(skipped_document(result.skipped))
        return doc
    assert isinstance(result, PrecisionReport)
    doc = head("precision")
    doc["eps"] = result.eps
    doc["vanishing"] = list(result.vanishing)
    doc["dtypes"] = [
        {
            "dtype": r.dtype,
            "precision_bits": r.precision_bits,
            "stored": jnum(r.stored),
            "relative_error": jnum(r.relative_error),
            "rounds_to_zero": r.rounds_to_zero,
            "subnormal": r.subnormal,
            "overflows": r.overflows,
            "absorbed_from": jnum(r.absorbed_from),
            "always_absorbed_from": jnum(r.always_absorbed_from),
            "loss_at_absorption": jnum(r.loss_at_absorption),
            "verified": r.verified,
            "max": r.max,
            "smallest_normal": r.smallest_normal,
            "smallest_subnormal": r.smallest_subnormal,
            "q_flush_to_zero_at_or_below": r.q_flush_to_zero_at_or_below,
            "square_finite_max": r.square_finite_max,
            "square_overflow_from": r.square_overflow_from,
        }
        for r in result.rows
    ]
    return doc

"""The canonical, versioned document of every result: plain dicts of unrounded numbers.

The JSON format is this document serialized; other reporters may build on it. Keys appear in
a fixed order and nothing depends on time or environment, so output is deterministic.
Non-finite floats (JSON has none) are written as the strings "nan", "inf", "-inf".
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

from rmsnorm_eps import __version__
from rmsnorm_eps.bound import BoundResult, RatioFigures

if TYPE_CHECKING:  # analysis imports numpy; `bound` must not pay for it (start-up time)
    from rmsnorm_eps.analysis import GateResult, LayerResult

__all__ = ["SCHEMA_VERSION", "document", "jnum"]

SCHEMA_VERSION = 1


def jnum(value: float | None) -> float | str | None:
    """A float as JSON allows it: finite numbers unchanged, NaN/inf as strings, None as null."""
    if value is None:
        return None
    v = float(value)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _head(command: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "rmsnorm-eps",
        "version": __version__,
        "command": command,
    }


def _shard(shard: int | None, index: tuple[int, ...] | None) -> dict[str, Any]:
    """Merged reports only: which shard an input came from and its index there."""
    if shard is None:
        return {}
    return {"shard": shard, "shard_index": list(index or ())}


def _layer(layer: LayerResult) -> dict[str, Any]:
    doc = _layer_figures(layer)
    if layer.eps_source is not None:  # ratio --config: where this layer's eps came from
        doc["eps_source"] = layer.eps_source
    # Only for dumps with token positions: the same figures for position 0 and the rest.
    if layer.first_token is not None and layer.other_tokens is not None:
        doc["first_token"] = _layer_figures(layer.first_token)
        doc["other_tokens"] = _layer_figures(layer.other_tokens)
    return doc


def _layer_figures(layer: LayerResult) -> dict[str, Any]:
    return {
        "name": layer.name,
        "eps": layer.eps,
        "shape": list(layer.shape),
        "dtype": layer.dtype,
        "raw_dim": layer.raw_dim,
        "count": layer.count,
        "nonfinite": layer.nonfinite,
        "nan": layer.nan_count,
        "inf": layer.inf_count,
        "zero": layer.zero_count,
        "below_bound": layer.below_bound,
        "violations": layer.violations,
        "violation_fraction": layer.violation_fraction,
        "min_q": jnum(layer.min_q),
        "max_q": jnum(layer.max_q),
        "min_ratio": jnum(layer.min_ratio),
        "min_attenuation": jnum(layer.min_attenuation),
        "worst": [
            {
                "index": list(w.index),
                "q": w.q,
                "ratio": w.ratio,
                "attenuation": w.attenuation,
                "loss": w.loss,
                **_shard(w.shard, w.shard_index),
            }
            for w in layer.worst
        ],
        "nonfinite_examples": [
            {"index": list(n.index), "value": jnum(n.value), **_shard(n.shard, n.shard_index)}
            for n in layer.nonfinite_examples
        ],
        "decades": [{"decade": k, "count": c} for k, c in layer.decades],
    }


def _gate(gate: GateResult | None) -> dict[str, Any] | None:
    if gate is None:
        return None
    return {
        "passed": gate.passed,
        "violations": gate.violations,
        "fraction": gate.fraction,
        "max_violations": gate.max_violations,
        "max_fraction": gate.max_fraction,
        "reason": gate.reason,
    }


def skipped_document(skipped: tuple[Any, ...]) -> dict[str, Any]:
    """``{"skipped": [{"name", "problem"}]}`` for layers left out by --skip-unreadable; an
    empty dict when none was (the key is absent from reports where nothing was skipped)."""
    if not skipped:
        return {}
    return {"skipped": [{"name": u.name, "problem": u.problem} for u in skipped]}


def document(result: object, gate: GateResult | None = None) -> dict[str, Any]:
    """The canonical dict for ``result``."""
    analysis = sys.modules.get("rmsnorm_eps.analysis")  # a RatioReport implies it is loaded
    if analysis is not None and isinstance(result, analysis.RatioReport):
        doc = _head("ratio")
        doc.update(
            {
                "source": result.source,
                "raw": result.raw,
                "delta": result.delta,
                "min_ratio": result.min_ratio,
                "tie_rule": "q/eps == min_ratio passes; violation when q/eps < min_ratio",
                "top_k": result.top_k,
                "summary": {
                    "layers": len(result.layers),
                    "count": result.count,
                    "below_bound": result.below_bound,
                    "nonfinite": result.nonfinite,
                    "violations": result.violations,
                    "violation_fraction": result.violation_fraction,
                    "layers_affected": list(result.layers_affected),
                },
                "gate": _gate(gate),
                "layers": [_layer(layer) for layer in result.layers],
            }
        )
        if result.shards:
            doc["command"] = "merge"
            doc["shards"] = list(result.shards)
        doc.update(skipped_document(result.skipped))
        return doc
    if isinstance(result, BoundResult):
        doc = _head("bound")
        doc.update(
            {
                "delta": result.delta,
                "min_ratio": result.min_ratio,
                "eps": result.eps,
                "min_q": result.min_q,
                "min_rms": result.min_rms,
            }
        )
        return doc
    if isinstance(result, tuple) and all(isinstance(r, RatioFigures) for r in result):
        doc = _head("bound")
        doc["ratios"] = [
            {
                "ratio": jnum(r.ratio),
                "attenuation": r.attenuation,
                "loss": r.loss,
                "eps": r.eps,
                "q": jnum(r.q),
            }
            for r in result
        ]
        return doc
    from rmsnorm_eps.reports import compare_document as _cmp

    if _cmp.supports(result):
        return _cmp.compare_document(result, gate, _head, _gate, jnum)

    from rmsnorm_eps.reports.config_report import config_document

    config_doc = config_document(result)
    if config_doc is not None:
        return config_doc

    if type(result).__module__.startswith("rmsnorm_eps.parity"):  # parity and probe results
        from rmsnorm_eps.reports.parity_document import parity_or_probe_document

        return parity_or_probe_document(result)
    raise TypeError(f"no document for {type(result).__name__}")

"""The canonical, versioned document of every result: plain dicts of unrounded numbers.

The JSON format is this document serialized; each command module builds its own
(``commands/<name>.py``: ``document``), from the helpers in :mod:`rmsnorm_eps.jsonvalues` (the
common head, numbers as JSON allows them) and here (the gate and the skipped layers). Keys
appear in a fixed order and nothing depends on time or environment, so output is
deterministic. Non-finite floats (JSON has none) are written as the strings "nan", "inf",
"-inf".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmsnorm_eps.reports.options import UnsupportedResult

if TYPE_CHECKING:
    from rmsnorm_eps.gate import GateResult

__all__ = [
    "document",
    "gate_document",
    "skipped_document",
]


def gate_document(gate: GateResult | None) -> dict[str, Any] | None:
    """A :class:`~rmsnorm_eps.analysis.GateResult` as a dict (None without a gate)."""
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


def document(result: object, gate: GateResult | None = None) -> dict[str, object]:
    """The canonical dict for ``result``, built by its command's reporter."""
    from rmsnorm_eps.reports.interface import DocumentRole
    from rmsnorm_eps.reports.options import RenderOptions
    from rmsnorm_eps.reports.registry import reporter_for

    reporter = reporter_for(result, RenderOptions(gate=gate))
    if not isinstance(reporter, DocumentRole):
        raise UnsupportedResult(f"no document for {type(result).__name__}")
    return reporter.document(result)

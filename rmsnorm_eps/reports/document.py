"""The canonical, versioned document of every result: plain dicts of unrounded numbers.

The JSON format is this document serialized; each command module builds its own
(``commands/<name>.py``: ``document``), from the helpers here: the common head, numbers as
JSON allows them, the gate and the skipped layers. Keys appear in a fixed order and nothing
depends on time or environment, so output is deterministic. Non-finite floats (JSON has none)
are written as the strings "nan", "inf", "-inf".
"""

from __future__ import annotations

import math
from typing import Any

from rmsnorm_eps import __version__
from rmsnorm_eps.reports.options import UnsupportedResult

__all__ = [
    "SCHEMA_VERSION",
    "document",
    "gate_document",
    "head",
    "jnum",
    "skipped_document",
]

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


def head(command: str) -> dict[str, Any]:
    """The keys every document starts with."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "rmsnorm-eps",
        "version": __version__,
        "command": command,
    }


def gate_document(gate: Any) -> dict[str, Any] | None:
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


def document(result: object, gate: Any = None) -> dict[str, Any]:
    """The canonical dict for ``result``, built by its command module."""
    from rmsnorm_eps.reports.registry import command_module, command_of

    module = command_module(command_of(result))
    if "json" not in module.FORMATS:
        raise UnsupportedResult(f"no document for {type(result).__name__}")
    doc: dict[str, Any] = module.document(result, gate)
    return doc

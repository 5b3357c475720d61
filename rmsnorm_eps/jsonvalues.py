"""What every JSON document of the package starts with, and numbers as JSON allows them: used
by the reports (:mod:`rmsnorm_eps.reports.document`) and by the library's own records
(``parity --record``), so neither imports the other."""

from __future__ import annotations

import math
from typing import Any

from rmsnorm_eps._version import __version__

__all__ = ["SCHEMA_VERSION", "head", "jnum"]

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

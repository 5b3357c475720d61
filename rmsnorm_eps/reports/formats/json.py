"""JSON format: a document (see :mod:`rmsnorm_eps.reports.document`), indented, keys in the
order the document gives them, floats with repr (the shortest round trip)."""

from __future__ import annotations

import json
from typing import Any

from rmsnorm_eps.escape import json_text

__all__ = ["render_document"]


def render_document(doc: dict[str, Any]) -> str:
    """Serialize ``doc`` (NaN and inf are refused: documents write them as strings), ASCII
    only, with no CI workflow command in any line (:func:`rmsnorm_eps.escape.json_text`)."""
    return json_text(json.dumps(doc, indent=2, allow_nan=False)) + "\n"

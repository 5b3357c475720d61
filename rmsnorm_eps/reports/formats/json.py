"""JSON format: a document (see :mod:`rmsnorm_eps.reports.document`), indented, keys in the
order the document gives them, floats with repr (the shortest round trip)."""

from __future__ import annotations

import io
import json
from typing import Any

from rmsnorm_eps.escape import json_text

__all__ = ["render_document"]


def render_document(doc: dict[str, Any]) -> str:
    """Serialize ``doc`` (NaN and inf are refused: documents write them as strings), ASCII
    only, with no CI workflow command in any line (:func:`rmsnorm_eps.escape.json_text`).

    The same text as ``json.dumps(doc, indent=2, allow_nan=False)``, but the encoder's pieces
    are written into one buffer as they come: ``json.dumps`` keeps them all in a list first
    (about 60 bytes per piece: 1.4 GB for a report of 100,000 layers)."""
    buf = io.StringIO()
    for chunk in json.JSONEncoder(indent=2, allow_nan=False).iterencode(doc):
        buf.write(chunk)
    buf.write("\n")
    return json_text(buf.getvalue())

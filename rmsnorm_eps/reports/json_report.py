"""JSON reporter: the canonical document (see ``document.py``), indented, keys in fixed order."""

from __future__ import annotations

import json

from rmsnorm_eps.reports import RenderOptions
from rmsnorm_eps.reports.document import document


def render(result: object, options: RenderOptions) -> str:
    """Serialize the result's document; floats are written with repr (shortest round trip)."""
    return json.dumps(document(result, options.gate), indent=2, allow_nan=False) + "\n"

"""reports/formats/json.py: the document serialized as ``json.dumps(doc, indent=2)`` would,
ASCII only, NaN refused, and no ``##`` (a CI command) in its text while it parses back to the
exact strings."""

from __future__ import annotations

import json

import pytest

from rmsnorm_eps.reports.formats.json import render_document
from tests.unit.report_cases import HOSTILE


def test_same_text_as_json_dumps_when_no_hash_pair() -> None:
    doc = {"b": 1, "a": [1.0, 0.1, 1e-300, None, True], "n": {"x": "é", "y": []}}
    out = render_document(doc)
    assert out == json.dumps(doc, indent=2, allow_nan=False) + "\n"
    assert list(json.loads(out)) == ["b", "a", "n"]  # the document's key order
    assert out.isascii() and "\\u00e9" in out


def test_floats_round_trip_exactly() -> None:
    values = [0.1 + 0.2, 49.25125628140703, 5e-324, 1.7976931348623157e308]
    assert json.loads(render_document({"v": values}))["v"] == values


def test_nan_and_inf_are_refused() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            render_document({"x": bad})


def test_hostile_text_is_inert_and_parses_back_exactly() -> None:
    doc = {"name": HOSTILE, "list": [HOSTILE]}
    out = render_document(doc)
    assert json.loads(out) == doc
    assert "##" not in out and "\\u0023#" in out
    assert "\x1b" not in out and "\\u001b[31m\\n" in out  # controls as JSON escapes
    assert all(not line.lstrip().startswith("::") for line in out.splitlines())
    assert out.count("\n") == json.dumps(doc, indent=2).count("\n") + 1

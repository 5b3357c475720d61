"""reports/schema.py: one shipped JSON Schema per command, found by the document's command
name, exact enough that a document with a key it does not name is rejected."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.reports.document import document
from rmsnorm_eps.reports.schema import SCHEMA_COMMANDS, load_schema, schema_text

DATA = Path(__file__).resolve().parents[2] / "rmsnorm_eps" / "data"


def test_every_command_has_its_file_and_the_file_is_draft_2020_12() -> None:
    assert {p.name for p in DATA.glob("*.schema.json")} == {
        f"{c}.schema.json" for c in SCHEMA_COMMANDS
    }
    for command in SCHEMA_COMMANDS:
        schema = load_schema(command)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", command
        branches = schema.get("oneOf", [schema])  # bound: the bound or A at given ratios
        assert all(b["additionalProperties"] is False for b in branches), command
        jsonschema.Draft202012Validator.check_schema(schema)
        text = schema_text(command)
        assert json.loads(text) == schema
        assert text == (DATA / f"{command}.schema.json").read_text("utf-8")


def test_a_documents_command_name_finds_its_schema() -> None:
    assert schema_text("config diff") == schema_text("config-diff")
    with pytest.raises(KeyError, match="no JSON schema for 'probe'"):
        schema_text("probe")


def test_schema_accepts_the_document_and_rejects_an_extra_key(
    write_npy: Callable[..., Path],
) -> None:
    rep = analyze_dump(write_npy(np.array([1e-9, 1.0], np.float64)), 1e-6)
    doc = document(rep)
    validator = jsonschema.Draft202012Validator(load_schema(str(doc["command"])))
    validator.validate(doc)
    with pytest.raises(jsonschema.ValidationError, match="surprise"):
        validator.validate({**doc, "surprise": 1})
    layer = dict(doc["layers"][0])  # type: ignore[index]
    layer["extra"] = 0
    with pytest.raises(jsonschema.ValidationError, match="extra"):
        validator.validate({**doc, "layers": [layer]})

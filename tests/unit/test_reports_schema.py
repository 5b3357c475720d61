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
        embedded = {k: v for k, v in schema.get("$defs", {}).items() if k in SCHEMA_COMMANDS}
        assert embedded == ({"ratio": load_schema("ratio")} if command == "merge" else {})
        own = json.loads(text)
        own.get("$defs", {}).update(embedded)
        assert own == schema
        assert text == (DATA / f"{command}.schema.json").read_text("utf-8")


def test_merge_schema_refers_to_ratios_layer_and_requires_the_shards() -> None:
    """merge.schema.json holds the envelope only: its layer is ratio's (by $ref), whose listed
    inputs must name their shard."""
    text = schema_text("merge")
    assert (
        len(text.splitlines()) < 200
        and '"$ref": "urn:rmsnorm-eps:schema:ratio:2#/$defs/layer"' in text
    )
    doc = json.loads((DATA.parents[1] / "tests" / "golden" / "merge.json").read_text("utf-8"))
    validator = jsonschema.Draft202012Validator(load_schema("merge"))
    validator.validate(doc)
    del doc["layers"][0]["worst"][0]["shard"]
    with pytest.raises(jsonschema.ValidationError, match="'shard' is a required property"):
        validator.validate(doc)
    doc["layers"][0]["worst"][0]["shard"] = 0
    doc["layers"][0]["count"] = "many"  # checked by ratio's layer
    with pytest.raises(jsonschema.ValidationError, match="'many' is not of type 'integer'"):
        validator.validate(doc)


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

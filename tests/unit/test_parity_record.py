"""rmsnorm_eps.parity.record: the record's format from its suffix; the JSON and YAML records
parse to the same document; writing is by suffix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.parity.api import check_parity
from rmsnorm_eps.parity.record import record_format, render_record, write_record
from tests.unit.parity_impls import rms


def test_format_by_suffix() -> None:
    assert [record_format(p) for p in ("a.yaml", "a.yml", "a.json", "a.md")] == [
        "yaml",
        "yaml",
        "json",
        "md",
    ]
    with pytest.raises(InvalidParameterError, match=r"\.yaml, \.yml, \.json or \.md"):
        record_format("a.txt")


def test_json_and_yaml_hold_the_same_record(tmp_path: Path) -> None:
    result = check_parity(rms(1e-6), dim=16, eps=1e-6)
    stamp = "2026-01-01T00:00:00Z"
    doc = json.loads(render_record(result, "json", stamp))
    assert yaml.safe_load(render_record(result, "yaml", stamp)) == doc
    write_record(result, tmp_path / "r.json", stamp)
    assert json.loads((tmp_path / "r.json").read_text("utf-8")) == doc
    assert render_record(result, "md", stamp).lstrip().startswith("#")

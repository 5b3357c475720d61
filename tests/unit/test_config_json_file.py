"""rmsnorm_eps.config.json_file: JSON with duplicate keys refused, NaN/Infinity kept as
NonFinite (not floats), and a size cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmsnorm_eps.config.json_file import MAX_JSON_BYTES, NonFinite, load_json, refuse_non_finite
from rmsnorm_eps.errors import InputFileError


def test_plain_json_equals_the_stdlib(tmp_path: Path) -> None:
    doc = {"a": [1, 2.5, None, True], "b": {"c": "d\u00e9"}, "rms_norm_eps": 1e-6}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert load_json(path) == doc


def test_duplicate_keys_are_refused_at_any_depth(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"x": {"a": 1, "a": 2}}')
    with pytest.raises(InputFileError, match="duplicate key"):
        load_json(path)


def test_non_finite_literals_are_marked_and_refused_where_a_number_is_needed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"a": NaN, "b": [Infinity, -Infinity]}')
    doc = load_json(path)
    assert isinstance(doc["a"], NonFinite)
    assert all(isinstance(v, NonFinite) for v in doc["b"])
    with pytest.raises(InputFileError, match=r"\[a\]"):
        refuse_non_finite(doc["a"], path, "a")
    refuse_non_finite(1e-6, path, "a")  # a number passes


def test_size_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b'{"a": "' + b"x" * MAX_JSON_BYTES + b'"}')
    with pytest.raises(InputFileError):
        load_json(path)

"""compare on a dump with token positions (as `capture` writes): position 0 reported apart."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.spec import parse_spec
from rmsnorm_eps.reports.schema import load_schema


def _dump(tmp: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    # 3 sequences of 4 tokens; the first tokens have the smallest q (they move most)
    q = np.array([8e-5, 5e-2, 6e-2, 7e-2, 3e-4, 4e-2, 5e-2, 6e-2, 6e-4, 1e-2, 2e-2, 3e-2])
    pos = np.tile(np.arange(4, dtype=np.int64), 3)
    path = tmp / "q.npz"
    np.savez(path, L=q.astype(np.float32), **{"L::position": pos})
    return path, q.astype(np.float32).astype(np.float64), pos


def _change(q: np.ndarray, eps_from: float, eps_to: float) -> np.ndarray:
    """Independent: y_to / y_from - 1 = sqrt((q + eps_from) / (q + eps_to)) - 1."""
    return np.sqrt((q + eps_from) / (q + eps_to)) - 1.0


def test_compare_splits_first_token(tmp_path: Path) -> None:
    path, q, pos = _dump(tmp_path)
    rep = compare_dump(path, parse_spec("eps=1e-6"), parse_spec("eps=1e-5"), top_k=2)
    layer = rep.layers[0]
    ft, ot = layer.first_token, layer.other_tokens
    assert ft is not None and ot is not None
    assert (ft.count, ot.count) == (3, 9) and ft.name == "L (first token)"
    ch = np.abs(_change(q, 1e-6, 1e-5))
    assert ft.moved == int((ch[pos == 0] > 0.01).sum()) == 2 and ot.moved == 0
    assert layer.moved == ft.moved + ot.moved
    assert ft.max_abs_change is not None and ot.max_abs_change is not None
    np.testing.assert_allclose(ft.max_abs_change, ch[pos == 0].max(), rtol=1e-12)
    np.testing.assert_allclose(ot.max_abs_change, ch[pos > 0].max(), rtol=1e-12)
    # worst indices are indices of the whole layer, largest |change| first
    assert [w.index for w in ft.worst] == [(0,), (4,)]
    assert [w.index for w in ot.worst] == [(9,), (10,)]
    assert sum(d.count for d in ft.decades) == 3


def test_compare_cli_text_and_json(tmp_path: Path, cli: Callable[..., Any]) -> None:
    path, _, _ = _dump(tmp_path)
    args = ("compare", "--q-file", str(path), "--from", "eps=1e-6", "--to", "eps=1e-5")
    r = cli(*args)
    assert r.exit_code == 1, r
    assert "By token position: first token (position 0) | other tokens" in r.stdout
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith(" L ")]
    # the layer row, its safe eps row, then its split: |change| at q = 8e-5 (first) and
    # q = 1e-2 (others)
    assert rows[2] == ["L", "3", "0.05132", "2", "2", "9", "0.0004497", "0", "0"]
    r = cli(*args, "--format", "json")
    full = json.loads(r.stdout)
    jsonschema.Draft202012Validator(load_schema("compare")).validate(full)
    doc = full["layers"][0]
    assert doc["first_token"]["count"] == 3 and doc["first_token"]["moved"] == 2
    assert doc["other_tokens"]["worst"][0]["index"] == [9]
    # without positions (or with --raw) there is no split
    np.save(tmp_path / "plain.npy", np.ones(4, np.float32))
    r = cli(
        "compare",
        "--q-file",
        str(tmp_path / "plain.npy"),
        "--from",
        "eps=1e-6",
        "--to",
        "eps=1e-5",
        "--format",
        "json",
    )
    assert r.exit_code == 0 and "first_token" not in json.loads(r.stdout)["layers"][0]

"""The per-layer record (rmsnorm_eps.layer_record): one table writes the ratio JSON layer and
the summary layer, and reads a layer back into the LayerResult it came from.

Round trip: ``ratio_layer(read_layer(L)) == L`` for every layer of every golden ratio and merge
document (their derived figures recomputed from the figures read back), and for analysed dumps
of any q values (zeros, NaN, +inf, LayerNorm's v, a position split) through the summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmsnorm_eps.analysis import RatioReport, analyze_dump
from rmsnorm_eps.layer_record import FIELDS, Reader, ratio_layer, read_layer, summary_layer
from rmsnorm_eps.merge import summary_document
from rmsnorm_eps.safe_eps import apply_zero_rule

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
#: What a ratio document says that the record does not read: where an input came from in a
#: merge (its shard) and where a layer's eps came from (--config).
NOT_READ = ("shard", "shard_index", "eps_source")


def _reader(doc: dict[str, Any], path: Path) -> Reader:
    r = Reader(path)
    r.min_ratio, r.top_k = doc["min_ratio"], doc["top_k"]
    return r


def _without(layer: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in layer.items() if k not in NOT_READ}
    for key in ("worst", "nonfinite_examples"):
        out[key] = [{k: v for k, v in e.items() if k not in NOT_READ} for e in out[key]]
    for part in ("first_token", "other_tokens"):
        if part in out:
            out[part] = _without(out[part])
    return out


def _round_trip(doc: dict[str, Any], path: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    r = _reader(doc, path)
    pairs = []
    for i, written in enumerate(doc["layers"]):
        layer = apply_zero_rule(read_layer(r, written, f"layers[{i}]."), doc["zero_is_violation"])
        back = json.loads(json.dumps(ratio_layer(layer)))
        pairs.append((_without(back), _without(written)))
    return pairs


GOLDEN_DOCS = sorted(
    p
    for p in GOLDEN.glob("*.json")
    if json.loads(p.read_text(encoding="utf-8")).get("command") in ("ratio", "merge")
)


def test_the_goldens_hold_ratio_and_merge_documents() -> None:
    assert {p.stem for p in GOLDEN_DOCS} >= {"ratio", "ratio-budget", "ratio-skipped", "merge"}


@pytest.mark.parametrize("path", GOLDEN_DOCS, ids=lambda p: p.stem)
def test_every_golden_layer_reads_back_to_itself(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    pairs = _round_trip(doc, path)
    assert pairs and all(back == written for back, written in pairs)


def _report(q: np.ndarray, tmp: Path, *, raw: bool = False, norm: str | None = None) -> RatioReport:
    np.save(tmp / "q.npy", q)
    return analyze_dump(tmp / "q.npy", 1e-6, raw=raw, norm=norm, top_k=3)


def _through_summary(report: RatioReport, tmp: Path) -> None:
    doc = json.loads(json.dumps(summary_document(report), allow_nan=False))
    r = _reader(doc, tmp / "s.json")
    for i, (layer, saved) in enumerate(zip(report.layers, doc["layers"], strict=True)):
        back = read_layer(r, saved, f"layers[{i}].")
        assert json.dumps(ratio_layer(back)) == json.dumps(ratio_layer(layer))
        # the summary layer is the ratio layer without its derived figures, in the same order
        derived = {f.key for f in FIELDS if f.check is None}
        assert list(saved) == [k for k in ratio_layer(layer) if k not in derived]


_Q = st.lists(
    st.one_of(
        st.floats(0.0, 1e6, allow_nan=False),
        st.sampled_from([0.0, float("nan"), float("inf"), 1e-9, 5e-5]),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=_Q)
def test_any_analysed_layer_reads_back_from_its_summary(
    tmp_path: Path, values: list[float]
) -> None:
    _through_summary(_report(np.array(values, np.float64), tmp_path), tmp_path)


def test_a_layernorm_layer_keeps_its_v(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 4, 16)) * 1e-3 + 2.0).astype(np.float32)
    report = _report(x, tmp_path, raw=True, norm="layer")
    assert report.layers[0].quantity == "v" and report.layers[0].below_bound > 0
    _through_summary(report, tmp_path)
    assert summary_layer(report.layers[0])["quantity"] == "v"


def test_a_position_split_reads_back(tmp_path: Path) -> None:
    q = np.array([[1e-9, 2.0, 3e-7], [0.0, 5e-6, 4.0]], np.float32)
    pos = np.array([[0, 1, 2], [0, 1, 2]], np.int64)
    np.savez(tmp_path / "d.npz", **{"a": q, "a::position": pos})
    report = analyze_dump(tmp_path / "d.npz", 1e-6, top_k=2)
    assert report.layers[0].first_token is not None
    _through_summary(report, tmp_path)

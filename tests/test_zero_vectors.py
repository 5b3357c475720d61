"""Zero vectors (q = 0 exactly, e.g. padding rows) are counted apart, not violations, in ratio,
compare, merge and every format; ``--zero-is-violation`` restores the old rule.

Each figure is checked against plain Python over the data (no accumulator involved)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.merge import load_summary, merge_summaries, write_summary
from rmsnorm_eps.reports import render
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.schema import load_schema

EPS = 1e-5
R1 = 49.25125628140703  # q/eps bound at delta = 1%


def _padded() -> np.ndarray:
    """A padding-heavy dump: 40 of 64 rows are zero vectors, and the real worst inputs are
    above the zeros (a worst-5 list of the smallest q would be all zeros)."""
    rng = np.random.default_rng(3)
    q = (10.0 ** rng.uniform(-2, 0, (8, 8))).astype(np.float32)  # q/eps >= 1000
    q[:5, :] = 0.0  # 40 padding rows
    q[6, 2] = np.float32(2e-4)  # one real input below the bound (q/eps = 20)
    return q


def _by_hand(q: np.ndarray, eps: float = EPS, ratio: float = R1, k: int = 5) -> dict[str, Any]:
    """The figures from plain Python over the values (float64 division per value)."""
    flat = [float(v) for v in q.ravel()]
    positive = sorted((v, i) for i, v in enumerate(flat) if v > 0 and v == v and v != float("inf"))
    return {
        "zero": sum(1 for v in flat if v == 0.0),
        "below": sum(1 for v, _ in positive if v / eps < ratio),
        "worst": [v for v, _ in positive[:k]],
        "worst_index": [i for _, i in positive[:k]],
        "min_pos_q": positive[0][0],
    }


def test_ratio_counts_zero_vectors_apart(write_npy: Callable[..., Path]) -> None:
    q = _padded()
    ref = _by_hand(q)
    report = analyze_dump(write_npy(q), EPS, top_k=5)
    (layer,) = report.layers
    assert layer.zero_count == ref["zero"] == 40
    assert layer.below_bound == ref["below"] == 1
    assert layer.violations == 1 and report.violations == 1
    assert layer.min_q == 0.0  # the true minimum, kept for compatibility
    assert layer.min_pos_q == ref["min_pos_q"]
    # the worst list shows the real worst inputs, not 5 of the 40 zeros
    assert [w.q for w in layer.worst] == ref["worst"]
    assert [int(np.ravel_multi_index(w.index, q.shape)) for w in layer.worst] == ref["worst_index"]
    assert layer.min_ratio == ref["min_pos_q"] / EPS
    strict = analyze_dump(write_npy(q), EPS, top_k=5, zero_is_violation=True)
    assert strict.violations == 41 and strict.layers[0].violations == 41
    assert [w.q for w in strict.layers[0].worst] == ref["worst"]


def test_only_zeros_pass_by_default_and_fail_with_the_flag(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "pad.npy"
    np.save(path, np.zeros((4, 3), np.float32))
    res = cli("ratio", str(path), "--eps", "1e-6")
    assert res.exit_code == 0, res.stdout
    assert "12 zero vector(s), output 0 under any eps, not counted" in res.stderr
    res = cli("ratio", str(path), "--eps", "1e-6", "--zero-is-violation")
    assert res.exit_code == 1
    assert "12 zero vector(s), each a violation" in res.stderr


def test_position_split_counts_zeros_per_part(write_npz: Callable[..., Path]) -> None:
    q = np.array([0.0, 1.0, 0.0, 0.0, 2e-4, 3.0], np.float32)
    pos = np.array([0, 1, 0, 1, 2, 3], np.int64)
    path = write_npz(**{"L": q, "L::position": pos})
    (layer,) = analyze_dump(path, EPS).layers
    assert layer.first_token is not None and layer.other_tokens is not None
    assert (layer.first_token.zero_count, layer.other_tokens.zero_count) == (2, 1)
    assert (layer.first_token.below_bound, layer.other_tokens.below_bound) == (0, 1)
    assert layer.first_token.worst == ()  # only zeros at position 0
    (strict,) = analyze_dump(path, EPS, zero_is_violation=True).layers
    assert strict.first_token is not None and strict.first_token.violations == 2


def test_compare_counts_zero_vectors_apart(write_npy: Callable[..., Path]) -> None:
    q = _padded()
    path = write_npy(q)
    report = compare_dump(path, "eps=1e-6", "eps=1e-5")
    (layer,) = report.layers
    assert layer.zero_count == 40
    # moved inputs by hand: factor sqrt(q + 1e-6) / sqrt(q + 1e-5) for q > 0, 1 for q = 0
    q64 = q.astype(np.float64).ravel()
    moved = sum(1 for v in q64 if v > 0 and abs(((v + 1e-6) / (v + 1e-5)) ** 0.5 - 1) > 0.01)
    assert layer.moved == moved and report.violations == moved
    strict = compare_dump(path, "eps=1e-6", "eps=1e-5", zero_is_violation=True)
    assert strict.violations == moved + 40


def _summaries(tmp_path: Path, q: np.ndarray) -> list[Path]:
    paths = []
    for i, rows in enumerate((slice(0, 3), slice(3, 8))):
        np.save(tmp_path / f"s{i}.npy", q[rows])
        write_summary(analyze_dump(tmp_path / f"s{i}.npy", EPS, top_k=5), tmp_path / f"s{i}.json")
        paths.append(tmp_path / f"s{i}.json")
    return paths


def test_merge_equals_the_whole_and_keeps_zeros_apart(
    tmp_path: Path, write_npy: Callable[..., Path]
) -> None:
    q = _padded()
    paths = _summaries(tmp_path, q)
    doc = json.loads(paths[0].read_text())
    assert doc["schema_version"] == 3 and doc["layers"][0]["worst"] == []  # shard 0: zeros only
    assert doc["layers"][0]["min_pos_q"] is None and doc["layers"][0]["zero"] == 24
    merged = merge_summaries(list(paths))
    whole = analyze_dump(write_npy(q), EPS, top_k=5)
    m, w = merged.layers[0], whole.layers[0]
    assert (m.zero_count, m.below_bound, m.violations) == (w.zero_count, w.below_bound, 1)
    assert [x.q for x in m.worst] == [x.q for x in w.worst] == _by_hand(q)["worst"]
    assert (m.min_q, m.min_pos_q, m.safe_eps) == (w.min_q, w.min_pos_q, w.safe_eps)
    strict = merge_summaries(list(paths), zero_is_violation=True)
    assert strict.violations == 41 and strict.layers[0].safe_eps is None


def test_merge_at_another_bound_leaves_zeros_out(tmp_path: Path) -> None:
    q = np.array([[0.0, 0.0, 1e-4, 1.0], [0.0, 5e-4, 2.0, 3.0]], np.float32)
    np.save(tmp_path / "s.npy", q)
    write_summary(analyze_dump(tmp_path / "s.npy", EPS, top_k=5), tmp_path / "s.json")
    merged = merge_summaries([tmp_path / "s.json"], delta=0.001)  # the worst list determines it
    ref = _by_hand(q, ratio=merged.min_ratio)
    assert merged.layers[0].below_bound == ref["below"]
    assert merged.layers[0].zero_count == 3


def test_a_version_1_summary_is_refused_in_one_line(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    np.save(tmp_path / "s.npy", np.array([0.0, 1.0], np.float32))
    write_summary(analyze_dump(tmp_path / "s.npy", EPS), tmp_path / "s.json")
    doc = json.loads((tmp_path / "s.json").read_text())
    doc["schema_version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match="summary version 1 counts q = 0 as below"):
        load_summary(tmp_path / "old.json")
    res = cli("merge", str(tmp_path / "old.json"))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "write it again" in res.stderr


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        ({"below_bound": 1}, "below_bound"),  # a zero counted as below: a version 1 habit
        ({"min_pos_q": 0.0}, "min_q"),
        ({"min_q": 1.0}, "min_q"),
    ],
)
def test_summary_validation_follows_the_new_meaning(
    tmp_path: Path, edit: dict[str, Any], key: str
) -> None:
    np.save(tmp_path / "s.npy", np.array([0.0, 1.0, 2.0], np.float32))
    write_summary(analyze_dump(tmp_path / "s.npy", EPS), tmp_path / "s.json")
    doc = json.loads((tmp_path / "s.json").read_text())
    doc["layers"][0].update(edit)
    (tmp_path / "e.json").write_text(json.dumps(doc))
    with pytest.raises(InputFileError) as err:
        load_summary(tmp_path / "e.json")
    assert (err.value.key or "").endswith(key)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "github", "junit", "sarif"])
@pytest.mark.parametrize("strict", [False, True])
def test_every_format_shows_the_zero_vectors(
    write_npy: Callable[..., Path], fmt: str, strict: bool
) -> None:
    report = analyze_dump(write_npy(_padded()), EPS, top_k=3, zero_is_violation=strict)
    gate = evaluate_gate(report)
    out = render(report, fmt, RenderOptions(gate=gate))
    if fmt == "json":
        doc = json.loads(out)
        jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)
        assert doc["schema_version"] == 2 and doc["zero_is_violation"] is strict
        assert doc["summary"]["zero"] == 40 and doc["layers"][0]["zero"] == 40
        assert doc["summary"]["violations"] == (41 if strict else 1)
        assert doc["layers"][0]["min_q"] == 0.0 and doc["layers"][0]["min_pos_q"] > 0
        assert all(w["q"] > 0 for w in doc["layers"][0]["worst"])
        return
    word = "each a violation" if strict else "not counted"
    assert "40 zero vector(s)" in out and word in out
    if fmt == "junit":
        ET.fromstring(out)
        assert "zero_vectors = 40" in out
    if fmt == "text":
        assert "q = 0" in out and ("violation" if strict else "zero vectors") in out
        # the worst rows are the real ones: the input below the bound first, no zero listed
        worst = out[out.index("worst 3 input(s)") :].splitlines()[4:7]
        assert worst[0].split()[:3] == ["[6,", "2]", "0.0002"], worst
        assert all(float(row.split()[2]) > 0 for row in worst)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "sarif"])
def test_compare_and_merge_formats_show_the_zero_vectors(
    tmp_path: Path, write_npy: Callable[..., Path], fmt: str
) -> None:
    report = compare_dump(write_npy(_padded()), "eps=1e-6", "eps=1e-5", zero_is_violation=True)
    out = render(report, fmt, RenderOptions(gate=evaluate_gate(report)))
    merged = merge_summaries(list(_summaries(tmp_path, _padded())))
    out_m = render(merged, fmt, RenderOptions(gate=evaluate_gate(merged)))
    if fmt == "json":
        doc, doc_m = json.loads(out), json.loads(out_m)
        jsonschema.Draft202012Validator(load_schema("compare")).validate(doc)
        jsonschema.Draft202012Validator(load_schema("merge")).validate(doc_m)
        assert doc["summary"]["zero"] == doc_m["summary"]["zero"] == 40
        assert doc["zero_is_violation"] is True and doc_m["zero_is_violation"] is False
        return
    assert "40 zero vector(s), each a violation" in out
    assert "40 zero vector(s)" in out_m and "not counted" in out_m


def test_cli_flag_on_ratio_compare_and_merge(tmp_path: Path, cli: Callable[..., Any]) -> None:
    q = _padded()
    np.save(tmp_path / "q.npy", q)
    paths = [str(p) for p in _summaries(tmp_path, q)]
    for args in (
        ("ratio", str(tmp_path / "q.npy"), "--eps", "1e-5"),
        ("compare", "--q-file", str(tmp_path / "q.npy"), "--from", "eps=1e-5", "--to", "eps=1e-5"),
        ("merge", *paths),
    ):
        plain = cli(*args, "--format", "json")
        strict = cli(*args, "--format", "json", "--zero-is-violation")
        v, vs = (json.loads(r.stdout)["summary"]["violations"] for r in (plain, strict))
        assert vs == v + 40, args
        assert strict.exit_code == 1


def test_fast_raw_worst_list_is_exact_after_chunks_of_zero_rows(tmp_path: Path) -> None:
    """The fast --raw path keeps its refinement bounds across chunks: rows of zeros seen first
    must not fill them (zero vectors are never listed), or the positive worst rows of later
    chunks would keep their float32 q."""
    from rmsnorm_eps.analysis import analyze_dump

    rng = np.random.default_rng(11)
    x = rng.standard_normal((4096, 16)).astype(np.float32) * 1e-3
    x[:1024] = 0.0  # the first chunks: padding only
    x[3000:3010] *= rng.uniform(1e-3, 1e-2, size=(10, 1)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    kw = {"raw": True, "top_k": 8, "chunk_bytes": 16 * 4 * 256, "threads": 1}
    fast = analyze_dump(tmp_path / "x.npy", 1e-9, fast=True, **kw).layers[0]
    exact = analyze_dump(tmp_path / "x.npy", 1e-9, fast=False, **kw).layers[0]
    assert fast.zero_count == exact.zero_count == 1024
    assert [(w.index, w.q) for w in fast.worst] == [(w.index, w.q) for w in exact.worst]
    assert fast.min_pos_q == exact.min_pos_q
    want = min(math.fsum(float(v) ** 2 for v in row) / 16 for row in x[1024:].tolist())
    assert fast.min_pos_q == pytest.approx(want, rel=1e-15, abs=0)

"""Property-based tests of issue 21's classes, each against an independent computation:

* CSV/TSV: any matrix, with or without a header (names that look like indices included), a
  byte-order mark and CRLF line ends, reads back exactly, every column, from one parse; a
  ``--column`` of digits is always that index;
* merge: a summary whose ``below_bound`` is edited is refused whenever its own worst list
  decides the count (never merged into a false PASS), and an unedited one merges to the
  analysis of the data;
* ``--raw`` in pieces: rows longer than a chunk and Fortran order in blocks give numpy's
  float64 mean of squares of the whole array.

Examples: 60 per property by default, more with RMSNORM_EPS_FUZZ_EXAMPLES=N (derandomized:
the same examples every run; RMSNORM_EPS_FUZZ_RANDOM=1 to explore).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmsnorm_eps import engine
from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.merge import load_summary, merge_summaries, summary_document
from rmsnorm_eps.numerics import q_threshold
from rmsnorm_eps.sources import open_sources

pytestmark = pytest.mark.slow  # the fuzz run (CI runs it; -m "not slow" skips it)

EXAMPLES = max(1, int(os.environ.get("RMSNORM_EPS_FUZZ_EXAMPLES", "2000")) * 3 // 100)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("RMSNORM_EPS_FUZZ_RANDOM", "") in ("", "0"),
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
_WORK = Path(tempfile.mkdtemp(prefix="rmsnorm-eps-fuzz3-"))

_VALUES = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=64)


def _column(src: Any) -> np.ndarray:
    return np.concatenate([v.copy() for _, v in src.iter_elements(1 << 20)])


@FUZZ
@given(
    matrix=st.integers(1, 12).flatmap(
        lambda rows: st.integers(1, 9).flatmap(
            lambda cols: st.lists(
                st.lists(_VALUES, min_size=cols, max_size=cols), min_size=rows, max_size=rows
            )
        )
    ),
    header=st.sampled_from(["none", "names", "digits"]),
    bom=st.booleans(),
    crlf=st.booleans(),
    tsv=st.booleans(),
)
def test_csv_reads_back_exactly(
    matrix: list[list[float]], header: str, bom: bool, crlf: bool, tsv: bool
) -> None:
    values = np.array(matrix, np.float64)
    cols = values.shape[1]
    sep, end = ("\t" if tsv else ","), ("\r\n" if crlf else "\n")
    lines = [sep.join(repr(v) for v in row) for row in matrix]
    names = {
        "names": [f"c{i}" for i in range(cols)],
        "digits": ["x"] + [str(cols - i) for i in range(1, cols)],
    }
    if header != "none":
        lines.insert(0, sep.join(names[header]))
    path = _WORK / ("f.tsv" if tsv else "f.csv")
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + (end.join(lines) + end).encode())
    opened = open_sources(path)
    assert len(opened.sources) == cols
    got = np.stack([_column(s) for s in opened.sources], axis=1)
    np.testing.assert_array_equal(got, values)
    j = cols - 1
    (src,) = open_sources(path, column=str(j)).sources
    np.testing.assert_array_equal(_column(src), values[:, j])  # digits: always the index
    if header != "none":  # a header (one cell is not a number) of names that may be digits
        (src,) = open_sources(path, column=f"name:{names[header][j]}").sources
        np.testing.assert_array_equal(_column(src), values[:, j])


_Q = st.lists(
    st.sampled_from([0.0, 1e-9, 1e-7, 1e-4, 4.9e-4, 5e-4, 1e-3, 1.0, 3e4]), min_size=1, max_size=12
)


@FUZZ
@given(q=_Q, top_k=st.integers(1, 6), edit=st.integers(-3, 3))
def test_edited_below_bound_never_merges_into_a_false_pass(
    q: list[float], top_k: int, edit: int
) -> None:
    path = _WORK / "q.npy"
    np.save(path, np.array(q, np.float64))
    report = analyze_dump(path, 1e-5, top_k=top_k)
    doc = summary_document(report)
    out = _WORK / "s.json"
    out.write_text(json.dumps(doc))
    merged = merge_summaries([out])
    # zero vectors (q = 0) are counted apart, not below the bound
    assert merged.layers[0].below_bound == sum(1 for v in q if 0 < v / 1e-5 < report.min_ratio)
    true = doc["layers"][0]["below_bound"]
    if edit == 0 or true + edit < 0:
        return
    doc["layers"][0]["below_bound"] = true + edit
    out.write_text(json.dumps(doc))
    t = q_threshold(1e-5, report.min_ratio)
    positive = sum(1 for v in q if v > 0)
    decided = any(w["q"] >= t for w in doc["layers"][0]["worst"]) or positive <= top_k
    try:
        load_summary(out)
    except InputFileError as exc:
        assert "below_bound" in exc.problem or "worst" in exc.problem
        return
    assert not decided, (q, top_k, edit)


@FUZZ
@given(
    n=st.integers(1, 4),
    d=st.integers(1, 300),
    dtype=st.sampled_from(["float16", "float32", "float64"]),
    fortran=st.booleans(),
    chunk=st.integers(2, 64),
    seed=st.integers(0, 2**16),
)
def test_raw_pieces_equal_the_whole_array(
    monkeypatch: pytest.MonkeyPatch,
    n: int,
    d: int,
    dtype: str,
    fortran: bool,
    chunk: int,
    seed: int,
) -> None:
    monkeypatch.setattr(engine, "F_BLOCK_ROWS", 2)
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(dtype)
    path = _WORK / "r.npy"
    np.save(path, np.asfortranarray(x) if fortran else x)
    (src,) = open_sources(path).sources
    *_, chunks = engine.iter_q_chunks(src, True, chunk)
    flat = np.full(n, -1.0)
    for start, q in chunks:
        flat[start : start + q.size] = q
    wide = x.astype(np.float64)
    np.testing.assert_allclose(flat, np.mean(wide * wide, axis=1), rtol=1e-12)

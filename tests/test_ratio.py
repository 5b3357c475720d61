"""The ratio analysis: streaming equals in-memory, the tie rule, nonfinite and bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps import numerics as nm
from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.errors import InputFileError, InvalidParameterError

R1 = 49.25125628140703  # min q/eps for delta = 1%


def _direct(q: np.ndarray, eps: float, ratio: float = R1) -> dict[str, float | int]:
    """Independent in-memory computation with a float64 division per value (zero vectors,
    q = 0, are counted apart: not below the bound)."""
    q64 = q.astype(np.float64).ravel()
    finite = q64[np.isfinite(q64)]
    r = finite / eps
    return {
        "below": int(np.count_nonzero((r < ratio) & (finite > 0))),
        "nonfinite": int(q64.size - finite.size),
        "min_q": float(finite.min()),
        "argmin": int(np.flatnonzero(q64 == finite.min())[0]),
    }


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_chunked_stream_equals_in_memory(dtype: type, write_npy: Callable[..., Path]) -> None:
    rng = np.random.default_rng(7)
    q = (10.0 ** rng.uniform(-9, -2, (517, 13))).astype(dtype)
    q[100, 3] = np.nan
    q[200, 5] = np.inf
    q[300, 0] = 0.0
    path = write_npy(q)
    small = analyze_dump(path, 1e-6, top_k=7, chunk_bytes=64)  # hundreds of chunks
    whole = analyze_dump(path, 1e-6, top_k=7, chunk_bytes=1 << 26)  # one chunk
    from rmsnorm_eps.reports.document import document

    assert document(small) == document(whole)  # (NaN != NaN defeats dataclass equality)
    layer = small.layers[0]
    ref = _direct(q, 1e-6)
    assert layer.below_bound == ref["below"]
    assert layer.nonfinite == ref["nonfinite"] == 2
    assert layer.nan_count == 1 and layer.inf_count == 1
    assert layer.min_q == ref["min_q"] == 0.0
    assert layer.zero_count == int(np.count_nonzero(q == 0))  # float16 underflows to 0 too
    assert layer.count == q.size
    # worst inputs are the k smallest positive finite q in ascending order
    q64 = q.astype(np.float64)
    finite = np.sort(q64[np.isfinite(q64) & (q64 > 0)].ravel())[:7]
    assert layer.min_pos_q == finite[0]
    first = int(np.flatnonzero(q64.ravel() == finite[0])[0])
    assert layer.worst[0].index == tuple(int(i) for i in np.unravel_index(first, q.shape))
    assert [w.q for w in layer.worst] == finite.tolist()
    # the decade histogram accounts for every finite, positive input
    assert sum(c for _, c in layer.decades) + layer.zero_count == q.size - 2


def test_decade_histogram_matches_log10(write_npy: Callable[..., Path]) -> None:
    rng = np.random.default_rng(8)
    q = 10.0 ** rng.uniform(-12, 0, 5000)
    path = write_npy(q)
    layer = analyze_dump(path, 1e-6, chunk_bytes=800).layers[0]
    k = np.floor(np.log10(q / 1e-6)).astype(int)
    expected = dict(zip(*np.unique(k, return_counts=True)))
    assert dict(layer.decades) == {int(a): int(b) for a, b in expected.items()}


def test_tie_exactly_at_the_bound_passes(write_npy: Callable[..., Path]) -> None:
    # eps = 0.25 and ratio 49.25 make q/eps exact in binary: q = 12.3125 sits on the bound.
    eps, ratio = 0.25, 49.25
    q = np.array(
        [12.3125, np.nextafter(np.float32(12.3125), np.float32(0)), 12.5], dtype=np.float32
    )
    path = write_npy(q)
    layer = analyze_dump(path, eps, min_ratio=ratio).layers[0]
    assert layer.below_bound == 1  # only the value one float32 ulp below the bound
    assert layer.worst[0].index == (1,)
    # the same with the real 1% bound: q = R1 exactly at eps = 1 passes, one ulp below fails
    q64 = np.array([R1, np.nextafter(R1, 0.0), np.nextafter(R1, np.inf)])
    layer = analyze_dump(write_npy(q64, "t64.npy"), 1.0, delta=0.01).layers[0]
    assert layer.below_bound == 1
    assert layer.worst[0].q == np.nextafter(R1, 0.0)


def test_exact_threshold_agrees_with_division_on_float32(write_npy: Callable[..., Path]) -> None:
    # values straddling the bound by single float32 ulps, for an eps that is not a power of 2
    eps = 1e-6
    centre = np.float32(R1 * eps)
    vals = [centre]
    for _ in range(20):
        vals.append(np.nextafter(vals[-1], np.float32(1)))
    lo = [centre]
    for _ in range(20):
        lo.append(np.nextafter(lo[-1], np.float32(0)))
    q = np.array(vals + lo, dtype=np.float32)
    layer = analyze_dump(write_npy(q), eps).layers[0]
    assert layer.below_bound == _direct(q, eps)["below"]


def test_npz_layers_and_multi_dim_index(write_npz: Callable[..., Path]) -> None:
    a = np.full((2, 3, 4), 1.0, np.float32)
    a[1, 2, 3] = 1e-9
    b = np.full(5, 1.0)
    path = write_npz(**{"blocks.0.norm": a, "final": b})
    rep = analyze_dump(path, 1e-6)
    assert [lay.name for lay in rep.layers] == ["blocks.0.norm", "final"]
    assert rep.layers[0].worst[0].index == (1, 2, 3)
    assert rep.layers[0].below_bound == 1 and rep.layers[1].below_bound == 0
    assert rep.layers_affected == ("blocks.0.norm",)


def test_per_layer_eps_mapping(write_npz: Callable[..., Path]) -> None:
    path = write_npz(a=np.array([1e-4]), b=np.array([1e-4]))
    rep = analyze_dump(path, {"a": 1e-6, "b": 1e-5})
    assert rep.layers[0].below_bound == 0  # q/eps = 100
    assert rep.layers[1].below_bound == 1  # q/eps = 10


def test_big_endian_and_fortran_order_give_correct_results(write_npy: Callable[..., Path]) -> None:
    rng = np.random.default_rng(9)
    q = 10.0 ** rng.uniform(-9, -3, (40, 30))
    base = analyze_dump(write_npy(q, "c.npy"), 1e-6, top_k=4)
    be = analyze_dump(write_npy(q.astype(">f8"), "be.npy"), 1e-6, top_k=4)
    f = analyze_dump(write_npy(np.asfortranarray(q), "f.npy"), 1e-6, top_k=4, chunk_bytes=96)
    for other in (be, f):
        assert other.layers[0].below_bound == base.layers[0].below_bound
        assert [w.index for w in other.layers[0].worst] == [w.index for w in base.layers[0].worst]
        assert other.layers[0].min_q == base.layers[0].min_q


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("fortran", [False, True])
def test_raw_activations(dtype: type, fortran: bool, write_npy: Callable[..., Path]) -> None:
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((6, 5, 33)) * 10.0 ** rng.uniform(-4, 0, (6, 5, 1))).astype(dtype)
    arr = np.asfortranarray(x) if fortran else x
    rep = analyze_dump(write_npy(arr), 1e-5, raw=True, top_k=3, chunk_bytes=200)
    layer = rep.layers[0]
    q = np.mean(x.astype(np.float64) ** 2, axis=-1)
    assert layer.shape == (6, 5) and layer.raw_dim == 33
    assert layer.min_q == pytest.approx(q.min(), rel=1e-12)
    assert layer.worst[0].index == tuple(int(i) for i in np.unravel_index(np.argmin(q), q.shape))
    assert layer.below_bound == int(np.count_nonzero(q / 1e-5 < R1))


def test_raw_no_overflow_or_underflow(write_npy: Callable[..., Path]) -> None:
    x = np.array([[3e38, -3e38], [1e-30, 1e-30], [0.0, 0.0]], np.float32)
    layer = analyze_dump(write_npy(x), 1e-6, raw=True).layers[0]
    assert layer.nonfinite == 0
    assert layer.max_q == pytest.approx(float(np.float32(3e38)) ** 2, rel=1e-12)
    assert layer.zero_count == 1  # the zero row: counted apart, not listed
    assert layer.worst[0].q == pytest.approx(float(np.float32(1e-30)) ** 2, rel=1e-12)
    x64 = np.array([[1e154] * 8, [1e-160] * 8])
    layer = analyze_dump(write_npy(x64, "x64.npy"), 1e-6, raw=True).layers[0]
    assert layer.max_q == pytest.approx(1e308, rel=1e-12)  # the sum overflows, the mean does not
    assert layer.min_q == pytest.approx(1e-320, rel=1e-3)  # subnormal, kept


def test_gate_budgets(write_npy: Callable[..., Path]) -> None:
    q = np.concatenate([np.full(98, 1.0), [1e-9, np.nan]])
    rep = analyze_dump(write_npy(q), 1e-6)
    assert rep.violations == 2 and rep.violation_fraction == 0.02
    assert not evaluate_gate(rep).passed
    assert evaluate_gate(rep, max_violations=2).passed
    assert not evaluate_gate(rep, max_violations=1).passed
    assert evaluate_gate(rep, max_fraction=0.02).passed  # unrounded comparison, <= passes
    assert not evaluate_gate(rep, max_fraction=0.0199999).passed
    assert not evaluate_gate(rep, max_violations=5, max_fraction=0.01).passed
    with pytest.raises(InvalidParameterError):
        evaluate_gate(rep, max_fraction=1.5)


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros(0, np.float32), "empty array"),
        (np.arange(4, dtype=np.int32), "unsupported dtype int32"),
        (np.ones(3, np.complex64), "unsupported dtype complex64"),
        (np.ones(3, bool), "unsupported dtype bool"),
        (np.zeros(2, dtype=[("a", "f4")]), "unsupported dtype structured"),
        (np.array([1.0, -1e-9]), "negative q -1e-09 at index [1]"),
    ],
)
def test_bad_arrays(array: np.ndarray, message: str, write_npy: Callable[..., Path]) -> None:
    path = write_npy(array)
    with pytest.raises(InputFileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        analyze_dump(path, 1e-6)


def test_pickled_object_array_is_refused_and_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = np.array([_Evil(str(marker))], dtype=object)
    path = tmp_path / "evil.npy"
    np.save(path, payload, allow_pickle=True)  # the attacker's side
    with pytest.raises(InputFileError, match="Python objects"):
        analyze_dump(path, 1e-6)
    assert not marker.exists()


class _Evil:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (open, (self.target, "w"))


def test_truncated_and_malformed_files(tmp_path: Path) -> None:
    good = tmp_path / "good.npy"
    np.save(good, np.ones(1000))
    data = good.read_bytes()
    (tmp_path / "trunc_data.npy").write_bytes(data[:-100])
    (tmp_path / "trunc_header.npy").write_bytes(data[:40])
    (tmp_path / "magic.npy").write_bytes(b"NOTNUMPY" + data[8:])
    (tmp_path / "empty.npy").write_bytes(b"")
    for name, msg in [
        ("trunc_data.npy", "truncated"),
        ("trunc_header.npy", "truncated"),
        ("magic.npy", "not a .npy or .npz"),
        ("empty.npy", "empty file"),
        ("missing.npy", "no such file"),
    ]:
        with pytest.raises(InputFileError, match=msg) as info:
            analyze_dump(tmp_path / name, 1e-6)
        assert name in str(info.value)
    with pytest.raises(InputFileError, match="is a directory"):
        analyze_dump(tmp_path, 1e-6)


def test_npz_member_errors(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "bad.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("notes.txt", "hello")
    with pytest.raises(InputFileError, match=r"'notes.txt' is not a \.npy"):
        analyze_dump(path, 1e-6)
    np.savez(tmp_path / "ints.npz", good=np.ones(3), bad=np.ones(3, np.int64))
    with pytest.raises(InputFileError, match=r"ints.npz \[bad\]: unsupported dtype int64"):
        analyze_dump(tmp_path / "ints.npz", 1e-6)


def test_json_document_matches_library(write_npz: Callable[..., Path]) -> None:
    from rmsnorm_eps.reports import RenderOptions, render

    rng = np.random.default_rng(1)
    path = write_npz(a=10.0 ** rng.uniform(-9, -3, 50), b=np.array([np.nan, 1.0, np.inf]))
    rep = analyze_dump(path, 1e-6, top_k=3)
    doc = json.loads(render(rep, "json", RenderOptions(gate=evaluate_gate(rep))))
    assert doc["schema_version"] == 2 and doc["command"] == "ratio"
    assert doc["min_ratio"] == R1
    assert doc["summary"]["violations"] == rep.violations
    a = doc["layers"][0]
    assert a["min_q"] == rep.layers[0].min_q
    assert a["below_bound"] == rep.layers[0].below_bound
    assert [w["q"] for w in a["worst"]] == [w.q for w in rep.layers[0].worst]
    assert doc["layers"][1]["nonfinite_examples"] == [
        {"index": [0], "value": "nan"},
        {"index": [2], "value": "inf"},
    ]
    assert doc["gate"]["passed"] is False
    assert nm.attenuation(a["min_ratio"]) == a["min_attenuation"]

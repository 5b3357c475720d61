"""compare/analysis.py: :class:`CompareAccumulator` against numpy over the same q (the factor
``c * sqrt(q + e_from) / sqrt(c**2 q + e_to)`` written out here, 1 for a zero vector), the
decade of ``q/eps_from`` at the float literal edges, the frozen layer's safe eps and verdicts,
the report's aggregates, and ``compare_dump``'s refusals naming the parameter, file and member."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.compare.analysis import (
    CompareAccumulator,
    _decade_of,
    compare_dump,
)
from rmsnorm_eps.compare.spec import EpsSpec
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.numerics import min_ratio
from rmsnorm_eps.safe_eps import safe_eps
from rmsnorm_eps.summary import NegativeValue

FROM = EpsSpec("eps=1e-6", 1e-6)
TO = EpsSpec("eps=1e-4", 1e-4)


def _q(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q = 10.0 ** rng.uniform(-9, 1, n)
    q[rng.choice(n, 5, replace=False)] = 0.0
    q[rng.choice(n, 3, replace=False)] = np.nan
    q[rng.choice(n, 2, replace=False)] = np.inf
    return q


@pytest.mark.parametrize("chunk", [17, 5000])
@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_the_accumulator_equals_numpy(chunk: int, scale: float) -> None:
    q = _q(5000, seed=2)
    tol, k = 0.01, 4
    acc = CompareAccumulator(FROM, TO, tol, scale, k)
    for start in range(0, q.size, chunk):
        acc.update(q[start : start + chunk], start)
    finite = np.isfinite(q)
    v = q[finite]
    idx = np.flatnonzero(finite)
    f = scale * np.sqrt(v + 1e-6) / np.sqrt(scale * scale * v + 1e-4)
    f[v == 0] = 1.0  # x = 0: both outputs are 0, whatever the denominators
    assert np.all(np.isfinite(f))
    ch = np.abs(f - 1.0)
    assert (acc.count, acc.nan_count, acc.inf_count, acc.zero_count) == (5000, 3, 2, 5)
    assert acc.moved == int((ch > tol).sum()) and acc.nonfinite_factor == 0
    assert acc.max_abs_change == pytest.approx(ch.max(), rel=1e-14)
    assert acc.min_factor == pytest.approx(f.min(), rel=1e-14)
    assert acc.max_factor == pytest.approx(f.max(), rel=1e-14)
    assert acc.min_pos_q == v[v > 0].min()
    order = np.lexsort((idx, -ch))[:k]
    assert acc.worst_index.tolist() == idx[order].tolist()
    assert acc.worst_q.tolist() == v[order].tolist()
    # the nonfinite examples: the first k nonfinite q in index order
    assert [i for i, _, _ in acc.bad] == np.flatnonzero(~finite)[:k].tolist()
    # decades of r = q / eps_from over the positive q: count, moved, max |change|
    pos = v > 0
    r = v[pos] / 1e-6
    dec = np.array([_literal_decade(x) for x in r.tolist()])
    for key, (count, moved, mx) in acc.decades.items():
        sel = dec == key
        assert count == int(sel.sum()) and moved == int((ch[pos][sel] > tol).sum())
        assert mx == pytest.approx(ch[pos][sel].max(), rel=1e-14)
    assert sum(c for c, _, _ in acc.decades.values()) == int(pos.sum())


def _literal_decade(r: float) -> int:
    """``k`` with ``float('1e{k}') <= r < float('1e{k+1}')``, by walking the literals."""
    k = math.floor(math.log10(r))
    while r < float(f"1e{k}"):
        k -= 1
    while r >= float(f"1e{k + 1}"):
        k += 1
    return k


def test_decades_at_the_literal_edges_one_float_either_side() -> None:
    edges = [float(f"1e{k}") for k in (-300, -7, -1, 0, 3, 22, 300)]
    values = [x for e in edges for x in (math.nextafter(e, 0.0), e, math.nextafter(e, math.inf))]
    got = _decade_of(np.array(values, np.float64)).tolist()
    assert got == [_literal_decade(x) for x in values]
    assert got[:3] == [-301, -300, -300]


def test_the_tie_rule_a_change_equal_to_the_tolerance_does_not_move() -> None:
    # eps 0 -> 3 at q = 1: factor sqrt(1) / sqrt(4) = 0.5 exactly, change -0.5
    acc = CompareAccumulator(EpsSpec("a", 5e-324), EpsSpec("b", 3.0), 0.5)
    acc.update(np.array([1.0]), 0)
    assert acc.max_abs_change == 0.5 and acc.moved == 0
    below = CompareAccumulator(EpsSpec("a", 5e-324), EpsSpec("b", 3.0), math.nextafter(0.5, 0.0))
    below.update(np.array([1.0]), 0)
    assert below.moved == 1


def test_a_vanished_eps_gives_a_nonfinite_factor_at_zero() -> None:
    # float16 rounds 1e-8 to 0: at q = 0 the denominator is 0 and the factor 0/0
    acc = CompareAccumulator(EpsSpec("a", 1e-8, dtype="float16"), TO, 0.01)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc.update(np.array([0.0, 1.0]), 7)
    # the zero vector's output is NaN: a nonfinite factor, not also a zero vector "not counted"
    assert acc.nonfinite_factor == 1 and acc.zero_count == 0
    assert acc.bad[0][0] == 7 and math.isnan(acc.bad[0][2])


def test_the_safe_eps_verdict_uses_the_eps_as_its_dtype_stores_it() -> None:
    """eps = 1.0001e-5 is stored as 1.0013580322265625e-05 in float16 (a subnormal there);
    a safe eps between the two: the stored --to eps is beyond it (it used to say within)."""
    from rmsnorm_eps.compare.spec import parse_spec

    to = parse_spec("eps=1.0001e-5,dtype=float16", "--to")
    assert to.stored_eps == 1.0013580322265625e-05 and to.note is None
    bound = float(min_ratio(0.01))
    q = bound * (to.eps + to.stored_eps) / 2  # safe eps = q / bound: between eps and R(eps)
    acc = CompareAccumulator(FROM, to, 0.01)
    acc.update(np.array([q]), 0)
    layer = acc.result(name="n", shape=(1,), order="C", dtype="float64", raw_dim=None)
    assert layer.safe_eps is not None and to.eps < layer.safe_eps < to.stored_eps
    assert layer.within_safe_eps is False
    assert layer.safe_eps_margin == pytest.approx(math.log10(layer.safe_eps / to.stored_eps))
    # stored as 0: within at any safe eps, and no finite margin
    zero = parse_spec("eps=1e-8,dtype=float16", "--to")
    acc = CompareAccumulator(FROM, zero, 0.01)
    acc.update(np.array([q]), 0)
    layer = acc.result(name="n", shape=(1,), order="C", dtype="float64", raw_dim=None)
    assert layer.within_safe_eps is True and layer.safe_eps_margin is None


def test_a_negative_q_is_refused_with_its_index() -> None:
    acc = CompareAccumulator(FROM, TO, 0.01)
    with pytest.raises(NegativeValue) as info:
        acc.update(np.array([1.0, -3.0]), 40)
    assert info.value.index == 41


def test_the_frozen_layer_safe_eps_and_verdicts() -> None:
    q = np.array([[2e-5, 0.5], [1e-3, 0.0]])
    acc = CompareAccumulator(FROM, TO, 0.01, 2.0)
    acc.update(q.ravel(), 0)
    layer = acc.result(name="n", shape=(2, 2), order="C", dtype="float64", raw_dim=None)
    # the --to side sees scale**2 q: the safe eps of 4 * 2e-5 under the 1% bound
    assert layer.safe_eps == safe_eps(4 * 2e-5, float(min_ratio(0.01)))
    assert layer.safe_eps is not None and layer.safe_eps < 1e-4 and layer.within_safe_eps is False
    assert layer.safe_eps_margin == pytest.approx(math.log10(layer.safe_eps / 1e-4), abs=1e-12)
    # |change| 0.317 at q = 2e-5, 0.0118 at 1e-3, ~1e-5 at 0.5, 0 at the zero vector
    assert [w.index for w in layer.worst] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    w = layer.worst[0]
    assert w.ratio == w.q / 1e-6 and w.change == w.factor - 1.0
    assert layer.violations == layer.moved and layer.zero_count == 1
    # a tolerance outside (0, 1): the bound is undefined
    acc1 = CompareAccumulator(FROM, TO, 1.0)
    acc1.update(np.array([1.0]), 0)
    undefined = acc1.result(name="n", shape=(1,), order="C", dtype="float64", raw_dim=None)
    assert undefined.safe_eps is None and undefined.within_safe_eps is None
    # no positive q: within at any eps
    acc0 = CompareAccumulator(FROM, TO, 0.01)
    acc0.update(np.zeros(3), 0)
    zeros = acc0.result(name="z", shape=(3,), order="C", dtype="float64", raw_dim=None)
    assert zeros.within_safe_eps is True and zeros.max_abs_change == 0.0
    assert zeros.min_pos_q is None and zeros.safe_eps_note.startswith("any")


def test_compare_dump_report_aggregates(write_npz: Callable[..., Path]) -> None:
    a = np.array([1e-6, 1e-2, 0.0], np.float64)
    b = np.array([1.0, 2.0], np.float64)
    report = compare_dump(write_npz(a=a, b=b), "eps=1e-6", "eps=1e-4")
    la, lb = report.layers
    assert report.moved == la.moved + lb.moved == 1  # only q = 1e-6 moves by more than 1%
    assert report.zero_count == 1 and report.max_abs_change == la.max_abs_change
    assert report.safe_eps == min(la.safe_eps, lb.safe_eps)  # type: ignore[type-var]
    assert report.within_safe_eps is False and lb.within_safe_eps is True
    assert report.bound_ratio == float(min_ratio(0.01))
    strict = compare_dump(write_npz(a=a, b=b), "eps=1e-6", "eps=1e-4", zero_is_violation=True)
    assert strict.layers[0].violations == la.violations + 1 and strict.layers[0].safe_eps is None


def test_compare_dump_refusals(write_npz: Callable[..., Path]) -> None:
    path = write_npz(a=np.array([1.0, -2.0]))
    with pytest.raises(InvalidParameterError, match="tolerance must be finite and >= 0"):
        compare_dump(path, "eps=1e-6", "eps=1e-5", tolerance=-0.1)
    with pytest.raises(InvalidParameterError, match="tolerance"):
        compare_dump(path, "eps=1e-6", "eps=1e-5", tolerance=math.nan)
    with pytest.raises(InvalidParameterError, match="scale"):
        compare_dump(path, "eps=1e-6", "eps=1e-5", scale=0.0)
    with pytest.raises(InvalidParameterError, match="--from config needs a model config"):
        compare_dump(path, "config", "eps=1e-5")
    with pytest.raises(InputFileError) as info:
        compare_dump(path, "eps=1e-6", "eps=1e-5")
    assert info.value.path == str(path) and info.value.key == "a"

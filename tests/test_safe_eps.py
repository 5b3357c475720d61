"""The safe eps: the largest eps at which every positive finite q meets the bound, exact in the
tool's own comparison (``fl(q/eps) >= min_ratio``), per layer, for the model, and in compare.

The checks are independent of the implementation: plain Python float division at the boundary
(eps = safe passes, the next float64 above fails), mpmath for the real quotient, and re-running
the analysis at the safe eps itself."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import mpmath
import numpy as np
import pytest

from rmsnorm_eps import numerics
from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.reports import render
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.schema import load_schema
from rmsnorm_eps.safe_eps import margin_decades, safe_eps

R1 = float(numerics.min_ratio(0.01))


def _values() -> list[tuple[float, float]]:
    rng = np.random.default_rng(11)
    qs = [float(x) for x in 10.0 ** rng.uniform(-300, 300, 150)]
    # (not the largest double: there numerics.q_threshold's ratio * eps overflows first)
    qs += [5e-324, 1e-310, 2.2250738585072014e-308, 1.0, 3.0, 1e308]
    ratios = [R1, float(numerics.min_ratio(1e-3)), float(numerics.min_ratio(0.3)), 1.0, 7.0]
    return [(q, r) for q in qs for r in ratios]


def test_the_boundary_is_exact_in_plain_float_division() -> None:
    for q, r in _values():
        e = safe_eps(q, r)
        if e is None:  # only when even the smallest positive eps fails
            assert q / 5e-324 < r, (q, r)
            continue
        assert e > 0.0 and q / e >= r, (q, r, e)  # eps = safe passes
        up = math.nextafter(e, math.inf)
        assert math.isinf(up) or q / up < r, (q, r, e)  # the next float64 above fails
        # and it is the rounded real quotient q / r, give or take a few ulps
        exact = mpmath.mpf(q) / mpmath.mpf(r)
        if exact > mpmath.mpf(1.7976931348623157e308):  # beyond float64: the largest one
            assert e == 1.7976931348623157e308
            continue
        assert abs(mpmath.mpf(e) - exact) <= 4 * mpmath.mpf(math.ulp(e)), (q, r, e)


def test_no_positive_q_means_no_bound() -> None:
    assert safe_eps(None, R1) is None and safe_eps(0.0, R1) is None
    assert safe_eps(math.inf, R1) is None and safe_eps(1.0, 0.0) is None
    assert margin_decades(None, 1e-5) is None
    assert margin_decades(1e-3, 1e-5) == pytest.approx(2.0, abs=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_dump_passes_at_its_safe_eps_and_fails_just_above(
    write_npz: Callable[..., Path], dtype: type
) -> None:
    rng = np.random.default_rng(5)
    a = (10.0 ** rng.uniform(-6, 0, 500)).astype(dtype)
    a[:7] = 0.0  # zero vectors do not bound it
    a[7] = np.nan  # nor do nonfinite values
    b = (10.0 ** rng.uniform(-3, 1, 300)).astype(dtype)
    path = write_npz(a=a, b=b)
    report = analyze_dump(path, 1e-6)
    la, lb = report.layers
    for layer, values in ((la, a), (lb, b)):
        finite = [float(v) for v in values.astype(np.float64) if v > 0 and math.isfinite(v)]
        m = min(finite)
        assert layer.min_pos_q == m
        assert layer.safe_eps is not None
        assert all(v / layer.safe_eps >= R1 for v in finite)
        assert m / math.nextafter(layer.safe_eps, math.inf) < R1
        assert layer.safe_eps_margin == pytest.approx(math.log10(layer.safe_eps / 1e-6), abs=1e-12)
        # the tool itself: no positive input below the bound at eps = safe_eps, one just above
        at = analyze_dump(path, {"a": layer.safe_eps, "b": layer.safe_eps}).layers
        above = analyze_dump(path, math.nextafter(layer.safe_eps, math.inf)).layers
        i = 0 if layer is la else 1
        assert at[i].below_bound == 0 and above[i].below_bound >= 1
    assert report.safe_eps == min(la.safe_eps, lb.safe_eps)  # type: ignore[type-var]
    assert report.safe_eps_margin == min(la.safe_eps_margin, lb.safe_eps_margin)  # type: ignore[type-var]


def test_float32_boundary_with_a_rounded_quotient(write_npy: Callable[..., Path]) -> None:
    """A q whose quotient by the bound rounds up: stepping down is needed (and done)."""
    for q in np.float32([1.1e-4, 3.3e-7, 7.77e-3, 2.5e-12, 9.99e-1]):
        m = float(q)
        e = safe_eps(m, R1)
        assert e is not None and m / e >= R1 and m / math.nextafter(e, 1.0) < R1
        layer = analyze_dump(write_npy(np.array([q, q * 4], np.float32)), e).layers[0]
        assert layer.below_bound == 0 and layer.safe_eps == e and layer.safe_eps_margin == 0.0


def test_zero_is_violation_leaves_no_safe_eps(write_npy: Callable[..., Path]) -> None:
    path = write_npy(np.array([0.0, 1e-3, 2.0], np.float32))
    plain = analyze_dump(path, 1e-6)
    assert plain.safe_eps == safe_eps(float(np.float32(1e-3)), R1)
    strict = analyze_dump(path, 1e-6, zero_is_violation=True)
    assert strict.layers[0].safe_eps is None and strict.safe_eps is None
    assert strict.safe_eps_note.startswith("none: zero vectors are violations at any eps")
    only_zeros = analyze_dump(write_npy(np.zeros(4, np.float32), "z.npy"), 1e-6)
    assert only_zeros.safe_eps is None and only_zeros.safe_eps_note.startswith("any")


def _dump(write_npz: Callable[..., Path]) -> Path:
    return write_npz(
        **{
            "model.layers.0.input_layernorm": np.array([2e-5, 1e-3, 0.5, 0.0], np.float32),
            "model.layers.0.post_attention_layernorm": np.array([0.3, 1.0, 2.0], np.float32),
        }
    )


def test_json_and_markdown_serve_the_safe_eps(write_npz: Callable[..., Path]) -> None:
    report = analyze_dump(_dump(write_npz), 1e-5)
    gate = evaluate_gate(report)
    doc = json.loads(render(report, "json", RenderOptions(gate=gate)))
    jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)
    l0, l1 = doc["layers"]
    assert l0["safe_eps"] == safe_eps(float(np.float32(2e-5)), R1)
    assert l1["safe_eps"] == safe_eps(float(np.float32(0.3)), R1)
    assert doc["summary"]["safe_eps"] == l0["safe_eps"]
    assert doc["summary"]["safe_eps_margin_decades"] == pytest.approx(
        math.log10(l0["safe_eps"] / 1e-5), abs=1e-12
    )
    assert l0["safe_eps_margin_decades"] < 0 < l1["safe_eps_margin_decades"]
    assert l0["safe_eps_note"] == ""
    md = render(report, "markdown", RenderOptions(gate=gate))
    assert f"| safe eps | {l0['safe_eps']:.6g} (margin" in md
    assert f"safe eps {l1['safe_eps']:.6g}" in md


def test_text_shows_the_safe_eps_within_80_columns(write_npz: Callable[..., Path]) -> None:
    report = analyze_dump(_dump(write_npz), 1e-5)
    text = render(report, "text", RenderOptions(gate=evaluate_gate(report), width=80))
    assert max(len(line) for line in text.splitlines()) <= 80
    e0 = report.layers[0].safe_eps
    assert e0 is not None and f"{e0:.6g}" in text and "Safe eps (model):" in text
    wide = render(report, "text", RenderOptions(gate=evaluate_gate(report)))
    assert "safe eps   margin (dec)" in wide


def test_compare_says_whether_the_target_is_within(
    write_npz: Callable[..., Path], cli: Callable[..., Any]
) -> None:
    path = _dump(write_npz)
    report = compare_dump(path, "eps=1e-6", "eps=1e-5")
    l0, l1 = report.layers
    assert l0.safe_eps == safe_eps(float(np.float32(2e-5)), R1)  # tolerance 0.01 = delta 1%
    assert (l0.within_safe_eps, l1.within_safe_eps, report.within_safe_eps) == (False, True, False)
    assert compare_dump(path, "eps=1e-6", "eps=1e-7").within_safe_eps is True
    # the --to side sees scale^2 q
    scaled = compare_dump(path, "eps=1e-6", "eps=1e-5", scale=2.0)
    assert scaled.layers[0].safe_eps == safe_eps(4.0 * float(np.float32(2e-5)), R1)
    res = cli("compare", "--q-file", str(path), "--from", "eps=1e-6", "--to", "eps=1e-5")
    assert "--to eps within the safe eps: no, in 1 layer(s): model.layers.0.input_layernorm" in (
        res.stdout
    )
    doc = json.loads(
        cli(
            "compare", "--q-file", str(path), "--from", "eps=1e-6", "--to", "eps=1e-5", "-f", "json"
        ).stdout
    )
    jsonschema.Draft202012Validator(load_schema("compare")).validate(doc)
    assert doc["summary"]["within_safe_eps"] is False
    assert [ly["within_safe_eps"] for ly in doc["layers"]] == [False, True]
    assert doc["safe_eps_bound"]["min_ratio"] == R1

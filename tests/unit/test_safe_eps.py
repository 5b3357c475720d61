"""The safe eps: the largest eps at which every positive finite q meets the bound, exact in the
tool's own comparison (``fl(q/eps) >= min_ratio``), per layer, for the model, and in compare.

The checks are independent of the implementation: plain Python float division at the boundary
(eps = safe passes, the next float64 above fails), mpmath for the real quotient, and re-running
the analysis at the safe eps itself."""

from __future__ import annotations

import dataclasses
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
from rmsnorm_eps.safe_eps import (
    apply_zero_rule,
    margin_decades,
    model_safe_eps,
    passes_at,
    safe_eps,
    safe_eps_note,
)

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


# --- the module's own helpers, on a hand-made layer type -------------------------------------


@dataclasses.dataclass(frozen=True)
class _Layer:
    """The fields :mod:`rmsnorm_eps.safe_eps` reads, with the position split."""

    eps: float
    zero_count: int
    min_pos_q: float | None
    safe_eps: float | None
    zeros_violate: bool = False
    first_token: _Layer | None = None
    other_tokens: _Layer | None = None

    @property
    def safe_eps_margin(self) -> float | None:
        return margin_decades(self.safe_eps, self.eps)

    @property
    def safe_eps_note(self) -> str:
        return safe_eps_note(
            zeros_violate=self.zeros_violate,
            zero_count=self.zero_count,
            has_pos=self.min_pos_q is not None,
        )


def test_passes_at_is_the_float_quotient_test_one_float_either_side() -> None:
    q = 3.0e-5
    e = q / R1  # plain float division: the quotient the bound is about
    while q / e < R1:
        e = math.nextafter(e, 0.0)
    while q / math.nextafter(e, math.inf) >= R1:
        e = math.nextafter(e, math.inf)
    assert passes_at(q, e, R1) is True
    assert passes_at(q, math.nextafter(e, 0.0), R1) is True
    assert passes_at(q, math.nextafter(e, math.inf), R1) is False
    assert safe_eps(q, R1) == e


def test_safe_eps_at_the_ends_of_the_float_range() -> None:
    # the largest q over a ratio of 1: the quotient is the largest double itself
    big = 1.7976931348623157e308
    assert safe_eps(big, 1.0) == big
    # the smallest subnormal q over a ratio of 7: no positive eps passes (q / 5e-324 = 1 < 7)
    assert safe_eps(5e-324, 7.0) is None
    # ... but over a ratio of 1 the smallest eps does, and only it
    assert safe_eps(5e-324, 1.0) == 5e-324
    # a nonfinite or non-positive ratio gives no bound
    assert safe_eps(1.0, math.nan) is None and safe_eps(1.0, -1.0) is None
    assert safe_eps(math.nan, R1) is None and safe_eps(-1.0, R1) is None


def test_margin_decades_is_log10_of_the_quotient() -> None:
    assert margin_decades(1e-9, 1e-6) == pytest.approx(-3.0, abs=1e-12)
    assert margin_decades(2.5e-4, 2.5e-4) == 0.0
    assert margin_decades(7e-3, 1e-5) == pytest.approx(math.log10(700.0), abs=1e-12)


def test_safe_eps_note_names_why_there_is_none() -> None:
    assert safe_eps_note(zeros_violate=False, zero_count=3, has_pos=True) == ""
    assert safe_eps_note(zeros_violate=True, zero_count=0, has_pos=True) == ""
    assert safe_eps_note(zeros_violate=True, zero_count=1, has_pos=True).startswith(
        "none: zero vectors"
    )
    assert "--zero-is-violation" in safe_eps_note(zeros_violate=True, zero_count=1, has_pos=False)
    assert safe_eps_note(zeros_violate=False, zero_count=2, has_pos=False) == (
        "any: no positive finite q"
    )


def test_model_safe_eps_is_the_minimum_over_bounded_layers() -> None:
    a = _Layer(eps=1e-6, zero_count=0, min_pos_q=1e-3, safe_eps=2e-5)
    b = _Layer(eps=1e-5, zero_count=0, min_pos_q=1e-2, safe_eps=3e-5)
    free = _Layer(eps=1e-6, zero_count=4, min_pos_q=None, safe_eps=None)
    safe, margin, note = model_safe_eps((a, free, b))
    assert safe == 2e-5 and note == ""
    # the margin is the minimum of the margins (b's: log10 3), not a's (log10 20), whose safe
    # eps is the minimum
    assert margin == pytest.approx(math.log10(3.0), abs=1e-12)
    assert model_safe_eps((free,)) == (None, None, "any: no positive finite q")
    assert model_safe_eps(()) == (None, None, "any: no positive finite q")
    blocked = _Layer(eps=1e-6, zero_count=1, min_pos_q=1.0, safe_eps=None, zeros_violate=True)
    safe, margin, note = model_safe_eps((a, blocked, b))
    assert (safe, margin) == (None, None) and note.startswith("none: zero vectors")


def test_apply_zero_rule_clears_the_safe_eps_of_layers_with_zeros_and_their_splits() -> None:
    first = _Layer(eps=1e-6, zero_count=2, min_pos_q=1e-3, safe_eps=2e-5)
    other = _Layer(eps=1e-6, zero_count=0, min_pos_q=1e-2, safe_eps=2e-4)
    layer = _Layer(
        eps=1e-6, zero_count=2, min_pos_q=1e-3, safe_eps=2e-5, first_token=first, other_tokens=other
    )
    assert apply_zero_rule(layer, False) is layer
    out = apply_zero_rule(layer, True)
    assert out.zeros_violate and out.safe_eps is None
    assert out.first_token is not None and out.other_tokens is not None
    assert out.first_token.zeros_violate and out.first_token.safe_eps is None
    # the split without zero vectors keeps its safe eps, now under the rule
    assert out.other_tokens.zeros_violate and out.other_tokens.safe_eps == 2e-4
    assert layer.safe_eps == 2e-5 and not layer.zeros_violate  # the input is unchanged
    no_zeros = apply_zero_rule(_Layer(eps=1e-6, zero_count=0, min_pos_q=1.0, safe_eps=0.02), True)
    assert no_zeros.safe_eps == 0.02 and no_zeros.first_token is None

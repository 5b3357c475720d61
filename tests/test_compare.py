"""compare: factors, placements, dtype rounding model, framework defaults, the dump analysis."""

from __future__ import annotations

import math
from pathlib import Path

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.factor import denominator, factor
from rmsnorm_eps.compare.spec import EpsSpec, parse_spec
from rmsnorm_eps.config.defaults import ROW_NAMES, framework_eps
from rmsnorm_eps.errors import ConfigError, InputFileError, InvalidParameterError
from rmsnorm_eps.kernels import mean_square_rows
from rmsnorm_eps.numerics import rmsnorm_reference
from tests.compare_fixture import write_q_dump

X_SEED = 0.001  # x = [0.001, 0.001]: q = 1e-6


def y_seed(spec: str) -> float:
    return X_SEED / float(denominator(1e-6, parse_spec(spec)))


# ----------------------------------------------------------------- seed cases


def test_seed_eps_change() -> None:
    assert y_seed("eps=1e-6") == pytest.approx(0.707107, abs=5e-7)
    assert y_seed("eps=1e-4") == pytest.approx(0.099504, abs=5e-7)
    f = float(factor(1e-6, parse_spec("eps=1e-6"), parse_spec("eps=1e-4")))
    assert f == pytest.approx(0.14071951, abs=5e-9)  # the issue quotes it truncated: 0.140719
    assert 0.140719 <= f < 0.140720
    assert f == pytest.approx(math.sqrt(2e-6 / 1.01e-4), rel=1e-15)


def test_seed_inside_vs_outside() -> None:
    assert y_seed("eps=1e-6") == pytest.approx(0.707107, abs=5e-7)
    assert y_seed("eps=1e-6,placement=outside") == pytest.approx(1000 / 1001, rel=1e-15)
    assert y_seed("eps=1e-6,placement=outside") == pytest.approx(0.999001, abs=5e-7)


def test_clamp_and_sum_denominators() -> None:
    assert float(denominator(1e-6, parse_spec("eps=1e-2,placement=clamp"))) == 1e-2
    assert float(denominator(1e-2, parse_spec("eps=1e-6,placement=clamp"))) == 0.1
    # eps added to the sum of squares over d = 4: effective eps/4
    d = float(denominator(1e-6, parse_spec("eps=4e-6,placement=sum,dim=4")))
    assert d == pytest.approx(math.sqrt(2e-6), rel=1e-15)


def test_factor_matches_mpmath() -> None:
    mpmath.mp.dps = 40
    for q in (0.0 + 1e-300, 1e-9, 3.7e-6, 0.5, 1e8):
        f = float(factor(q, parse_spec("eps=1e-6"), parse_spec("eps=1e-5")))
        mq = mpmath.mpf(q)
        ref = mpmath.sqrt((mq + mpmath.mpf(1e-6)) / (mq + mpmath.mpf(1e-5)))
        assert f == pytest.approx(float(ref), rel=4e-16)


# ----------------------------------------------------------------- raw vs reference


def test_raw_compare_equals_reference_twice(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    scales = 10.0 ** rng.uniform(-5, 2, size=(40, 1))
    x = rng.standard_normal((40, 16)) * scales
    path = tmp_path / "x.npz"
    np.savez(path, acts=x)
    a, b = parse_spec("eps=1e-6"), parse_spec("eps=1e-4")
    y_from = rmsnorm_reference(x, 1e-6)
    y_to = rmsnorm_reference(x, 1e-4)
    ref = y_to / y_from  # every component of a row has the same ratio
    assert np.allclose(ref, ref[:, :1], rtol=1e-13, atol=0)
    ours = factor(mean_square_rows(x), a, b)
    assert np.max(np.abs(ours / ref[:, 0] - 1)) <= 1e-12
    report = compare_dump(path, a, b, raw=True, top_k=40)
    (layer,) = report.layers
    assert layer.raw_dim == 16 and layer.count == 40 and len(layer.worst) == 40
    for w in layer.worst:
        assert abs(w.factor / ref[w.index[0], 0] - 1) <= 1e-12
    moved_ref = int(np.count_nonzero(np.abs(ref[:, 0] - 1) > 0.01))
    assert layer.moved == moved_ref and 0 < moved_ref < 40


# ----------------------------------------------------------------- properties

EPS = st.floats(1e-12, 1e-1)
Q = st.floats(0.0, 1e6)
PLACEMENTS = st.sampled_from(["inside", "outside", "clamp", "sum"])


def spec(eps: float, placement: str = "inside", dtype: str = "float64") -> EpsSpec:
    dim = 8 if placement == "sum" else None
    return EpsSpec(text="test", eps=eps, placement=placement, dim=dim, dtype=dtype)


@settings(max_examples=200, deadline=None)
@given(q=Q, e1=EPS, e2=EPS, placement=PLACEMENTS)
def test_larger_eps_never_increases_output(q: float, e1: float, e2: float, placement: str) -> None:
    lo, hi = min(e1, e2), max(e1, e2)
    assert float(factor(q, spec(lo, placement), spec(hi, placement))) <= 1.0


@settings(max_examples=200, deadline=None)
@given(
    q=Q,
    e=EPS,
    placement=PLACEMENTS,
    dtype=st.sampled_from(["float64", "float32", "float16", "bfloat16"]),
)
def test_same_spec_gives_factor_one(q: float, e: float, placement: str, dtype: str) -> None:
    f = float(factor(q, spec(e, placement, dtype), spec(e, placement, dtype)))
    den = float(denominator(q, spec(e, placement, dtype)))
    if math.isfinite(den) and den > 0:
        assert f == 1.0
    else:
        assert math.isnan(f)


@settings(max_examples=200, deadline=None)
@given(q=Q, e1=EPS, e2=EPS, p1=PLACEMENTS, p2=PLACEMENTS)
def test_compare_is_antisymmetric(q: float, e1: float, e2: float, p1: str, p2: str) -> None:
    a, b = spec(e1, p1), spec(e2, p2)
    assert float(factor(q, a, b)) * float(factor(q, b, a)) == pytest.approx(1.0, rel=1e-15)


@settings(max_examples=200, deadline=None)
@given(q=st.floats(1e-12, 1e6), e=EPS, c=st.floats(1e-3, 1e3))
def test_scale_equals_eps_over_c_squared(q: float, e: float, c: float) -> None:
    a = spec(1e-6)
    scaled = float(factor(q, a, spec(e), scale=c))
    direct = float(factor(q, a, spec(e / (c * c))))
    assert scaled == pytest.approx(direct, rel=1e-14)


@given(q=st.floats(0.0, 1e6), k=st.integers(-10, 10))
def test_scale_power_of_two_is_bit_identical(q: float, k: int) -> None:
    c = 2.0**k
    a = spec(1e-6)
    assert float(factor(q, a, spec(3e-5), scale=c)) == float(factor(q, a, spec(3e-5 / (c * c))))


# ----------------------------------------------------------------- dtype rounding model


def test_float16_model_uses_stored_eps() -> None:
    s = parse_spec("eps=1e-6,dtype=float16")
    # q = 2**-10 is a float16 value; q + e rounds in float16 (ulp 2**-20 there)
    e16 = float(np.float16(1e-6))
    expected = float(np.sqrt(np.float32(np.float16(np.float16(2.0**-10) + np.float16(e16)))))
    assert float(denominator(2.0**-10, s)) == float(np.float16(expected))


def test_float16_eps_vanishes_gives_nonfinite_at_zero() -> None:
    a, b = parse_spec("eps=1e-8"), parse_spec("eps=1e-8,dtype=float16")
    f = factor(np.array([0.0, 1e-6, 1e5]), a, b)
    assert math.isnan(f[0])  # 0/0: eps rounded to 0 in float16
    assert f[1] == pytest.approx(1.0, abs=0.05)
    assert f[2] == 0.0  # q = 1e5 overflows float16: den = inf, y = 0


def test_bfloat16_denominator_against_ml_dtypes() -> None:
    bf = pytest.importorskip("ml_dtypes").bfloat16
    q = np.array([1e-7, 3.3e-6, 2.5e-4, 0.7, 123.0], np.float32).astype(np.float64)
    s = parse_spec("eps=1e-6,dtype=bfloat16")
    qb = q.astype(bf)
    eb = np.asarray(1e-6).astype(bf)
    expected = np.sqrt((qb + eb).astype(np.float32)).astype(bf).astype(np.float64)
    assert np.array_equal(denominator(q, s), expected)


# ----------------------------------------------------------------- specs and frameworks


@pytest.mark.parametrize(
    ("name", "dtype", "eps", "compute"),
    [
        ("torch", "bfloat16", 1.1920928955078125e-07, "float32"),
        ("torch", "float16", 1.1920928955078125e-07, "float32"),
        ("torch", "float32", 1.1920928955078125e-07, "float32"),
        ("torch", "float64", 2.220446049250313e-16, "float64"),
        ("hf-llama", None, 1e-6, "float32"),
        ("hf-mistral", None, 1e-6, "float32"),
        ("hf-gemma", "bfloat16", 1e-6, "float32"),
        ("hf-olmo2", None, 1e-5, "float32"),
        ("hf-t5", None, 1e-6, "float32"),
        ("flax", "bfloat16", 1e-6, "float32"),
        ("flax", None, 1e-6, None),
        ("keras", None, 1e-6, None),
        ("mlx", None, 1e-5, None),
        ("onnx", "float16", 1e-5, "float32"),
        ("vllm", None, 1e-6, None),
        ("tensorrt-llm", None, 1e-6, None),
        ("flashinfer", None, 1e-6, None),
        ("torchtune", None, 1e-6, None),
        ("apex", None, 1e-5, None),
        ("transformer-engine", None, 1e-5, None),
    ],
)
def test_framework_defaults(name: str, dtype: str | None, eps: float, compute: str | None) -> None:
    d = framework_eps(name, dtype)
    assert d.eps == eps and d.compute_dtype == compute
    assert name in ROW_NAMES
    spec = parse_spec(f"framework={name}" + (f",dtype={dtype}" if dtype else ""))
    assert (spec.eps, spec.dtype, spec.framework) == (eps, compute or "float64", name)


def test_framework_names_are_the_config_table_rows() -> None:
    # compare resolves through the one defaults table: every row name is unique, and the
    # group names of several rows are refused rather than picking one of them
    assert len(set(ROW_NAMES)) == len(ROW_NAMES)
    assert parse_spec("framework=apex-functional").eps == 1e-6
    assert parse_spec("framework=meta-llama").eps == 1e-6
    with pytest.raises(ConfigError, match="several defaults; pick one: hf-llama"):
        parse_spec("framework=transformers")


def test_framework_errors() -> None:
    with pytest.raises(ConfigError, match="add dtype="):
        framework_eps("torch")
    with pytest.raises(ConfigError, match="layer_norm_rms_epsilon"):
        framework_eps("llama.cpp", "float16")
    with pytest.raises(InvalidParameterError, match="unknown framework 'jax'; known: torch, "):
        framework_eps("jax")


def test_torch_default_matches_torch_itself() -> None:
    torch = pytest.importorskip("torch")
    x = torch.full((1, 4), 2e-4, dtype=torch.bfloat16)
    y = torch.nn.functional.rms_norm(x, (4,), eps=None).float()
    s = parse_spec("framework=torch,dtype=bfloat16")
    q = float(x.float().pow(2).mean())
    ours = float(x.float()[0, 0]) / float(denominator(q, s))
    assert float(y[0, 0]) == pytest.approx(ours, rel=8e-3)  # bf16 output rounding
    # the same with the old half-dtype eps (2**-7 for bf16) would be far off
    old = float(x.float()[0, 0]) / math.sqrt(q + 2.0**-7)
    assert abs(float(y[0, 0]) - old) > 0.4


def test_parse_spec() -> None:
    s = parse_spec("eps=1e-6,placement=sum,dim=64,dtype=bfloat16")
    assert (s.eps, s.placement, s.dim, s.dtype) == (1e-6, "sum", 64, "bfloat16")
    t = parse_spec("framework=torch,dtype=bfloat16")
    assert (t.eps, t.dtype, t.input_dtype, t.framework) == (
        2.0**-23,
        "float32",
        "bfloat16",
        "torch",
    )
    assert "torch default" in t.describe()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("config", "--to config takes per-layer settings from a model config"),
        ("eps=0", "finite and > 0"),
        ("eps=abc", "must be a number"),
        ("eps=1e-6,placement=middle", "placement must be one of"),
        ("eps=1e-6,placement=sum", "give dim=D"),
        ("eps=1e-6,dim=8", "only used by placement=sum"),
        ("eps=1e-6,placement=sum,dim=0", "dim must be >= 1"),
        ("eps=1e-6,dtype=int8", "dtype must be one of"),
        ("eps=1e-6,eps=1e-5", "given twice"),
        ("eps", "expected key=value"),
        ("placement=inside", "give eps=E or framework=NAME"),
        ("eps=1e-6,framework=torch", "not both"),
        ("framework=hf-llama,placement=outside", "inside the square root"),
        ("speed=1", "unknown key 'speed'"),
        ("", "empty SPEC"),
    ],
)
def test_parse_spec_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        parse_spec(text, "--to")


# ----------------------------------------------------------------- dump analysis


def test_compare_dump_on_fixture(tmp_path: Path) -> None:
    path = write_q_dump(tmp_path / "q_dump.npz")
    r = compare_dump(path, parse_spec("eps=1e-6"), parse_spec("eps=1e-5"), top_k=2)
    assert [layer.moved for layer in r.layers] == [2, 0, 0]
    first = r.layers[0]
    assert [w.index for w in first.worst] == [(1, 1), (0, 0)]
    assert first.worst[0].factor == pytest.approx(math.sqrt(8.1e-5 / 9e-5), rel=1e-6)
    assert r.violations == 2 and r.count == 24


def test_compare_dump_counts_nonfinite_and_rejects_negative(tmp_path: Path) -> None:
    path = tmp_path / "q.npy"
    np.save(path, np.array([1e-6, np.nan, np.inf, 0.0, 1.0]))
    r = compare_dump(path, parse_spec("eps=1e-6"), parse_spec("eps=1e-5"))
    (layer,) = r.layers
    assert (layer.nan_count, layer.inf_count, layer.zero_count, layer.moved) == (1, 1, 1, 1)
    assert layer.violations == 3
    assert [d.decade for d in layer.decades] == [0, 6]
    np.save(path, np.array([1e-6, -1.0]))
    with pytest.raises(InputFileError, match=r"negative q -1.0 at index \[1\]"):
        compare_dump(path, parse_spec("eps=1e-6"), parse_spec("eps=1e-5"))


def test_tie_rule_equal_change_passes(tmp_path: Path) -> None:
    path = tmp_path / "q.npy"
    np.save(path, np.array([4e-6]))
    a, b = parse_spec("eps=1e-6"), parse_spec("eps=1e-5")
    ch = abs(float(factor(4e-6, a, b)) - 1.0)
    assert compare_dump(path, a, b, tolerance=ch).layers[0].moved == 0
    assert compare_dump(path, a, b, tolerance=math.nextafter(ch, 0)).layers[0].moved == 1


def test_chunking_does_not_change_results(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    path = tmp_path / "q.npz"
    np.savez(path, a=10 ** rng.uniform(-8, 0, 5000), b=10 ** rng.uniform(-8, 0, (50, 30)))
    a, b = parse_spec("eps=1e-6"), parse_spec("eps=3e-6,dtype=bfloat16")
    whole = compare_dump(path, a, b, top_k=7)
    small = compare_dump(path, a, b, top_k=7, chunk_bytes=800)
    assert whole == small


def test_raw_dim_must_match_sum_spec(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.ones((3, 8)))
    with pytest.raises(InputFileError, match="dim=4 but the activations have d = 8"):
        compare_dump(
            path, parse_spec("eps=1e-6"), parse_spec("eps=1e-6,placement=sum,dim=4"), raw=True
        )


@pytest.mark.parametrize(
    ("spelling", "name"), [("bf16", "bfloat16"), ("FP16", "float16"), ("f32", "float32")]
)
def test_spec_dtype_takes_every_dtype_alias(spelling: str, name: str) -> None:
    from rmsnorm_eps.compare.spec import parse_spec

    assert parse_spec(f"eps=1e-6,dtype={spelling}").dtype == name
    assert parse_spec(f"framework=torch,dtype={spelling}").input_dtype == name


def test_spec_dtype_refuses_an_unknown_name() -> None:
    from rmsnorm_eps.compare.spec import parse_spec
    from rmsnorm_eps.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="int8"):
        parse_spec("eps=1e-6,dtype=int8")

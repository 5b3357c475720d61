"""rmsnorm_eps.dtypes, the one dtype module: every spelling of a dtype maps to numpy's name
(only when the caller accepts it; the error names the choices); the formats' limits equal
numpy's finfo and carry torch.testing's default tolerances; round_to equals numpy's own
(correctly rounded) casts for float16, float32 and float64, and the bfloat16 rounding equals
the float32 bit rule and ml_dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.dtypes import (
    DTYPE_ALIASES,
    FORMATS,
    bfloat16_from_float32_bits,
    canonical_dtype,
    coarser,
    get_format,
    name_of,
    numpy_dtype,
    round_to,
)
from rmsnorm_eps.errors import InvalidParameterError

RNG = np.random.default_rng(7)
ALL = ("float16", "bfloat16", "float32", "float64")


def _values() -> np.ndarray:
    x = 10.0 ** RNG.uniform(-46, 39, 4000) * RNG.choice([-1.0, 1.0], 4000)
    specials = [0.0, -0.0, 65504.0, 65520.0, 6.1e-5, 5.96e-8, 2.98e-8, 3.4e38, np.inf, -np.inf]
    return np.concatenate([x, specials])


@pytest.mark.parametrize(("name", "np_dtype"), [("float16", np.float16), ("float32", np.float32)])
def test_round_to_equals_numpys_cast(name: str, np_dtype: type) -> None:
    x = _values()
    with np.errstate(over="ignore"):
        want = x.astype(np_dtype).astype(np.float64)
    got = round_to(x, name)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)


def test_bfloat16_three_ways() -> None:
    with np.errstate(over="ignore"):
        x32 = _values().astype(np.float32).astype(np.float64)  # bfloat16 of a float32 value
    got = round_to(x32, "bfloat16")
    np.testing.assert_array_equal(got, bfloat16_from_float32_bits(x32))
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np.testing.assert_array_equal(got, x32.astype(ml_dtypes.bfloat16).astype(np.float64))


def test_formats() -> None:
    f = get_format("bfloat16")
    assert (f.precision, f.emin, f.emax) == (8, -126, 127)
    assert get_format("float16").precision == 11 and get_format("float32").precision == 24
    with pytest.raises((InvalidParameterError, KeyError, ValueError)):
        get_format("float8")


def test_aliases_name_real_dtypes() -> None:
    assert set(DTYPE_ALIASES.values()) == set(ALL)
    for alias, name in DTYPE_ALIASES.items():
        if name != "bfloat16":  # numpy has no bfloat16
            assert np.dtype(name).name == name, alias
    assert all(k == k.lower() for k in DTYPE_ALIASES)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("bf16", "bfloat16"),
        ("FP16", "float16"),
        (" half ", "float16"),
        ("Double", "float64"),
        ("float", "float32"),
        ("f32", "float32"),
    ],
)
def test_spellings(text: str, want: str) -> None:
    assert canonical_dtype(text, ALL) == want


def test_refusals_name_the_choices() -> None:
    with pytest.raises(
        ValueError, match=r"^'int8' is not one of float32, float64 \(or bf16, fp16, fp32\.\.\.\)$"
    ):
        canonical_dtype("int8", ("float32", "float64"))
    with pytest.raises(ValueError, match="'bf16' is not one of float32"):
        canonical_dtype("bf16", ("float32",))  # a known spelling outside the choices
    with pytest.raises(ValueError, match="is not one of"):
        canonical_dtype("", ALL)


@pytest.mark.parametrize(
    ("name", "np_dtype", "rtol", "atol"),
    [
        ("float16", np.float16, 1e-3, 1e-5),
        ("float32", np.float32, 1.3e-6, 1e-5),
        ("float64", np.float64, 1e-7, 1e-7),
    ],
)
def test_info_matches_finfo_and_torch_testing(
    name: str, np_dtype: type, rtol: float, atol: float
) -> None:
    info = get_format(name)
    assert info.max == float(np.finfo(np_dtype).max)
    assert info.significand_bits == np.finfo(np_dtype).nmant + 1
    assert (info.torch_rtol, info.torch_atol) == (rtol, atol)  # torch.testing.assert_close
    assert numpy_dtype(name) == np.dtype(np_dtype)
    assert name_of(np.dtype(np_dtype).newbyteorder(">")) == name
    x = np.array([1 / 3, 65519.0, 1e-8, -2.5])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(round_to(x, name), x.astype(np_dtype).astype(np.float64))


def test_coarser_and_unknown_names() -> None:
    assert coarser("float32", "bfloat16") == "bfloat16"
    assert coarser("float16", "float64") == "float16"
    assert get_format("bfloat16").significand_bits == 8
    assert name_of(np.dtype(np.int32)) is None
    with pytest.raises(InvalidParameterError):
        get_format("float8")


@pytest.mark.parametrize("np_dtype", [np.float16, np.float32, np.float64])
def test_limits_are_numpys_finfo(np_dtype: type) -> None:
    fi = np.finfo(np_dtype)
    f = FORMATS[fi.dtype.name]
    assert (f.precision, f.emin, f.emax) == (fi.nmant + 1, fi.minexp, fi.maxexp - 1)
    assert f.max == float(fi.max) and f.smallest_normal == float(fi.smallest_normal)
    assert f.smallest_subnormal == float(fi.smallest_subnormal)
    assert f.unit_roundoff == float(fi.eps) / 2


def test_the_command_line_vocabulary_needs_no_numpy() -> None:
    import subprocess
    import sys

    code = "import sys, rmsnorm_eps.dtypes; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr

"""rmsnorm_eps.parity.dtypes: ranges and roundoff equal numpy's finfo; torch.testing's default
tolerances; rounding equals numpy's casts."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.parity.dtypes import coarser, dtype_info, name_of, numpy_dtype, round_to


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
    info = dtype_info(name)
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
    assert dtype_info("bfloat16").significand_bits == 8
    assert name_of(np.dtype(np.int32)) is None
    with pytest.raises(InvalidParameterError):
        dtype_info("float8")

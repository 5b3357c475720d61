"""dtype_names.py: every spelling of a dtype maps to numpy's name, in any case and with
surrounding blanks, but only when the caller accepts that dtype; the error names the choices."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.dtype_names import DTYPE_ALIASES, canonical_dtype

ALL = ("float16", "bfloat16", "float32", "float64")


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

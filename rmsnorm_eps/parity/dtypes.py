"""The floating-point formats a parity check knows: range, unit roundoff, torch.testing defaults.

Unit roundoff ``u = 2**-(p)`` with ``p`` the significand bits including the implicit one
(float16 11, bfloat16 8, float32 24, float64 53): round-to-nearest has relative error <= u.
The (rtol, atol) pairs are torch.testing.assert_close's per-dtype defaults
(PyTorch docs, torch.testing.assert_close).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rmsnorm_eps.errors import InvalidParameterError, MissingExtraError

__all__ = ["DTYPES", "DtypeInfo", "coarser", "dtype_info", "numpy_dtype", "round_to"]


@dataclass(frozen=True)
class DtypeInfo:
    """One format: name, significand bits p, largest finite value, torch.testing defaults."""

    name: str
    significand_bits: int
    max: float
    torch_rtol: float
    torch_atol: float

    @property
    def unit_roundoff(self) -> float:
        """``u = 2**-p``: the largest relative error of rounding to nearest."""
        return 2.0**-self.significand_bits


DTYPES: dict[str, DtypeInfo] = {
    "float16": DtypeInfo("float16", 11, 65504.0, 1e-3, 1e-5),
    "bfloat16": DtypeInfo("bfloat16", 8, 3.3895313892515355e38, 1.6e-2, 1e-5),
    "float32": DtypeInfo("float32", 24, 3.4028234663852886e38, 1.3e-6, 1e-5),
    "float64": DtypeInfo("float64", 53, 1.7976931348623157e308, 1e-7, 1e-7),
}


def dtype_info(name: str) -> DtypeInfo:
    """The :class:`DtypeInfo` for a dtype name; InvalidParameterError for any other name."""
    try:
        return DTYPES[name]
    except KeyError:
        raise InvalidParameterError(
            f"dtype must be one of {', '.join(DTYPES)}, got {name!r}"
        ) from None


def coarser(a: str, b: str) -> str:
    """The dtype with fewer significand bits (the one whose rounding dominates)."""
    return a if DTYPES[a].significand_bits <= DTYPES[b].significand_bits else b


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype for a name; bfloat16 comes from ml_dtypes (extra ``bf16``)."""
    dtype_info(name)
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise MissingExtraError("ml_dtypes", "bf16", "bfloat16 probes") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def name_of(dtype: np.dtype[Any]) -> str | None:
    """The name of a numpy float dtype we know (either byte order), or None."""
    if dtype.kind == "f":
        name = str(dtype.newbyteorder("="))
        return name if name in DTYPES else None
    return "bfloat16" if dtype.name == "bfloat16" else None


def round_to(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` rounded to the format ``name`` (nearest even) and widened back to float64."""
    return np.asarray(x, dtype=np.float64).astype(numpy_dtype(name)).astype(np.float64)

"""The floating-point formats the package knows, in one place: their names and spellings, their
limits, and correctly rounded conversion to them.

* **Names.** :data:`DTYPE_ALIASES`: every spelling a ``--dtype`` option or a SPEC ``dtype=``
  accepts (``bf16``, ``fp16``, ``half``, ``double``, ...), mapped to numpy's name;
  :func:`canonical_dtype`. ``--dtype`` always names the dtype of the data (how the values are
  stored or computed), whatever the command.
* **Limits.** :class:`FloatFormat`: ``precision`` significand bits p (the implicit bit
  included: float16 11, bfloat16 8, float32 24, float64 53) and normal exponents
  ``emin..emax``, numpy.finfo's ``nmant + 1``, ``minexp`` and ``maxexp - 1`` for numpy's formats
  (written out, so that the command line's ``--dtype`` parsing needs no numpy; a test checks
  them against finfo) and the format's definition for bfloat16 (numpy has none); the largest
  finite value, the smallest normal and subnormal, the unit roundoff ``u = 2**-p`` follow.
  Each format also carries torch.testing.assert_close's default (rtol, atol) for its dtype
  (PyTorch docs, torch.testing.assert_close), which the parity check uses.
* **Rounding.** :func:`round_to` rounds float64 values to the nearest value of a format (ties
  to even, gradual underflow, overflow to inf) and returns float64 arrays holding the rounded
  values exactly: one algorithm for every format, so arithmetic "in dtype T" is modelled as
  computing the exact (or float64) result and rounding it. The bfloat16 path is cross-checked
  in the tests against :func:`bfloat16_from_float32_bits` (round to nearest even on the float32
  bit pattern) and against ``ml_dtypes.bfloat16`` (:func:`bfloat16_ml_dtypes`, extra ``[bf16]``).

Used by ``compare`` (SPEC ``dtype=`` and its rounding model), ``precision``, ``parity`` (probe
dtypes, tolerances), the readers (the float dtypes a dump may hold: :data:`STORED_FLOATS`) and
the command line (``--dtype`` spellings). A leaf module: numpy is imported by the functions
that compute, so ``--help`` stays free of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rmsnorm_eps.errors import InvalidParameterError, MissingExtraError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

__all__ = [
    "DTYPE_ALIASES",
    "FORMATS",
    "STORED_FLOATS",
    "FloatFormat",
    "bfloat16_from_float32_bits",
    "bfloat16_ml_dtypes",
    "canonical_dtype",
    "coarser",
    "get_format",
    "name_of",
    "numpy_dtype",
    "round_to",
]

#: Every spelling ``--dtype`` accepts, mapped to numpy's name.
DTYPE_ALIASES: dict[str, str] = {
    "float16": "float16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "float64": "float64",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
}

#: The float dtypes a dump may store as such (bfloat16 comes as 2-byte bit patterns or as a
#: format's own BF16 tag: the readers handle it apart).
STORED_FLOATS = ("float16", "float32", "float64")


def canonical_dtype(text: str, choices: tuple[str, ...]) -> str:
    """numpy's name for ``text`` (any spelling of :data:`DTYPE_ALIASES`, any case), if it is
    one of ``choices``; ValueError naming the accepted names otherwise."""
    name = DTYPE_ALIASES.get(text.strip().lower())
    if name is None or name not in choices:
        raise ValueError(f"{text!r} is not one of {', '.join(choices)} (or bf16, fp16, fp32...)")
    return name


@dataclass(frozen=True)
class FloatFormat:
    """A binary format: ``precision`` significand bits (implicit bit included), normal
    exponents ``emin..emax``: normal values are ``m * 2**e`` with ``1 <= m < 2``; and
    torch.testing.assert_close's default ``(torch_rtol, torch_atol)`` for the dtype."""

    name: str
    precision: int
    emin: int
    emax: int
    torch_rtol: float
    torch_atol: float

    @property
    def significand_bits(self) -> int:
        """``p``, the same as :attr:`precision`."""
        return self.precision

    @property
    def max(self) -> float:
        """Largest finite value ``(2 - 2**(1-p)) * 2**emax``."""
        return float((2.0 - 2.0 ** (1 - self.precision)) * 2.0**self.emax)

    @property
    def smallest_normal(self) -> float:
        return float(2.0**self.emin)

    @property
    def smallest_subnormal(self) -> float:
        return float(2.0 ** (self.emin - self.precision + 1))

    @property
    def unit_roundoff(self) -> float:
        """``u = 2**-p``: the largest relative error of rounding to nearest."""
        return 2.0**-self.precision


#: (precision, emin, emax) are numpy.finfo's (nmant + 1, minexp, maxexp - 1) for float16,
#: float32 and float64 (tests/unit/test_dtypes.py checks them), bfloat16's by its definition
#: (float32's exponent, 8 significand bits).
FORMATS: dict[str, FloatFormat] = {
    "float16": FloatFormat("float16", 11, -14, 15, 1e-3, 1e-5),
    "bfloat16": FloatFormat("bfloat16", 8, -126, 127, 1.6e-2, 1e-5),
    "float32": FloatFormat("float32", 24, -126, 127, 1.3e-6, 1e-5),
    "float64": FloatFormat("float64", 53, -1022, 1023, 1e-7, 1e-7),
}


def get_format(name: str) -> FloatFormat:
    """The :class:`FloatFormat` called ``name``; InvalidParameterError for any other name."""
    try:
        return FORMATS[name]
    except KeyError:
        raise InvalidParameterError(
            f"dtype must be one of {', '.join(FORMATS)}, got {name!r}"
        ) from None


def coarser(a: str, b: str) -> str:
    """The dtype with fewer significand bits (the one whose rounding dominates)."""
    return a if FORMATS[a].precision <= FORMATS[b].precision else b


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype for a name; bfloat16 comes from ml_dtypes (extra ``bf16``)."""
    import numpy as np

    get_format(name)
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
        return name if name in FORMATS else None
    return "bfloat16" if dtype.name == "bfloat16" else None


def round_to(x: npt.ArrayLike, fmt: FloatFormat | str) -> FloatArray:
    """Round float64 values to the nearest value of ``fmt`` (ties to even), as float64.

    With ``|x| = m * 2**E`` (``1 <= m < 2``) the quantum is ``2**(max(E, emin) - p + 1)``;
    ``rint(x / quantum) * quantum`` is the correctly rounded value (both scalings are exact
    powers of two, ``rint`` rounds half to even). A result of ``2**(emax+1)`` or more is
    ``inf``. Zeros keep their sign, NaN and inf pass through.
    """
    import numpy as np

    f = get_format(fmt) if isinstance(fmt, str) else fmt
    arr = np.asarray(x, dtype=np.float64)
    out = np.array(arr, dtype=np.float64, copy=True)
    finite = np.isfinite(arr) & (arr != 0.0)
    if not np.any(finite):
        return out
    v = arr[finite]
    _, e = np.frexp(v)  # |v| = m * 2**e with 0.5 <= m < 1, so E = e - 1
    qexp = np.maximum(e - 1, f.emin) - (f.precision - 1)
    r = np.ldexp(np.rint(np.ldexp(v, -qexp)), qexp)
    limit = 2.0 ** (f.emax + 1) if f.emax < 1023 else np.inf  # 2**1024 is no float64
    r = np.where(np.abs(r) >= limit, np.copysign(np.inf, v), r)
    out[finite] = r
    return out


def bfloat16_from_float32_bits(x: npt.ArrayLike) -> FloatArray:
    """bfloat16 rounding by bit manipulation: keep the top 16 bits of the float32 pattern after
    adding ``0x7FFF + lsb`` (lsb = bit 16), which is round to nearest, ties to even; a carry
    into the exponent gives the next binade or inf. NaN stays NaN (quiet). Input is rounded to
    float32 first (exact for float32 input)."""
    import numpy as np

    f32 = np.asarray(x, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    lsb = (bits >> np.uint64(16)) & np.uint64(1)
    rounded = ((bits + np.uint64(0x7FFF) + lsb) & np.uint64(0xFFFF0000)).astype(np.uint32)
    with np.errstate(invalid="ignore"):
        out = rounded.view(np.float32).astype(np.float64)
    return np.where(np.isnan(f32), np.nan, out)


def bfloat16_ml_dtypes(x: npt.ArrayLike) -> FloatArray:
    """bfloat16 rounding by ``ml_dtypes`` (optional extra ``[bf16]``), returned as float64.

    ml_dtypes before 0.7 converts float64 through float32, so for float64 input it can differ
    from the correctly rounded :func:`round_to` by double rounding (about 1 in 1e5 random
    values; 0.7 rounds once); for float32-representable input the two agree exactly.
    """
    import numpy as np

    try:
        import ml_dtypes
    except ImportError:
        raise MissingExtraError("ml_dtypes", "bf16", "bfloat16 via ml_dtypes") from None
    arr = np.asarray(x, dtype=np.float64)
    out: FloatArray = arr.astype(ml_dtypes.bfloat16).astype(np.float64)
    return out

"""Framework default eps: the table, and the one number a given framework/dtype/version uses.

torch's eps=None is the machine epsilon 2**-p of a float type with p fraction bits
(float16 p=10, bfloat16 p=7, float32 p=23, float64 p=52): since PR 142848 (first in torch 2.7)
the compute (opmath) type's, i.e. float32's for float16/bfloat16/float32 inputs; before it the
input dtype's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from rmsnorm_eps.config.defaults_table import FRAMEWORK_DEFAULTS, FrameworkDefault
from rmsnorm_eps.errors import InvalidParameterError

__all__ = [
    "DTYPES",
    "MACHINE_EPS",
    "DefaultsResult",
    "ResolvedDefault",
    "framework_defaults",
    "torch_default_eps",
]

#: Fraction bits p of each float type; its machine epsilon is 2**-p.
_FRACTION_BITS = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}
DTYPES = tuple(_FRACTION_BITS)
MACHINE_EPS = {name: 2.0**-bits for name, bits in _FRACTION_BITS.items()}
#: First torch release with the opmath rule (PR 142848 merged January 2025, after the 2.6
#: release branch was cut). Inferred from the merge date, not measured on 2.6/2.7.
TORCH_OPMATH_FROM = (2, 7)
_OPMATH = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}


@dataclass(frozen=True)
class ResolvedDefault:
    """The eps one API uses for the given dtype/version, or None with the reason."""

    row: FrameworkDefault
    eps: float | None
    explanation: str


@dataclass(frozen=True)
class DefaultsResult:
    """Rows of the defaults table, resolved for an optional dtype and torch version."""

    framework: str | None
    dtype: str | None
    torch_version: str | None
    rows: tuple[ResolvedDefault, ...]


def _parse_version(text: str) -> tuple[int, int]:
    core = text.strip().lstrip("v").split("+")[0]
    parts = core.split(".")
    try:
        major = int(parts[0])
        minor = int("".join(c for c in parts[1] if c.isdigit()) or "0") if len(parts) > 1 else 0
    except (ValueError, IndexError):
        raise InvalidParameterError(
            f"torch version must look like 2.6 or 2.13.0, got {text!r}"
        ) from None
    return major, minor


def torch_default_eps(dtype: str, torch_version: str | None = None) -> tuple[float, str]:
    """eps used by torch.nn.RMSNorm / F.rms_norm with eps=None for ``dtype`` inputs.

    From 2.7 (or when no version is given: current torch): 2**-p of the compute type
    (float32 for half inputs). Before 2.7: 2**-p of the input dtype.
    """
    if dtype not in _FRACTION_BITS:
        raise InvalidParameterError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if torch_version is not None and _parse_version(torch_version) < TORCH_OPMATH_FROM:
        return MACHINE_EPS[dtype], (
            f"torch {torch_version} (< 2.7): finfo({dtype}).eps, the input dtype's own"
        )
    compute = _OPMATH[dtype]
    where = f"torch {torch_version}" if torch_version else "current torch (>= 2.7)"
    return MACHINE_EPS[compute], (
        f"{where}: finfo({compute}).eps, the compute type of {dtype} inputs"
    )


def framework_defaults(
    framework: str | None = None, dtype: str | None = None, torch_version: str | None = None
) -> DefaultsResult:
    """The table (optionally one framework's rows), each row resolved to a number if it can be."""
    if dtype is not None and dtype not in _FRACTION_BITS:
        raise InvalidParameterError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if torch_version is not None:
        _parse_version(torch_version)
    names = sorted({r.framework for r in FRAMEWORK_DEFAULTS})
    rows = [r for r in FRAMEWORK_DEFAULTS if framework is None or r.framework == framework.lower()]
    if not rows:
        raise InvalidParameterError(f"unknown framework {framework!r}; known: {', '.join(names)}")
    out = []
    for row in rows:
        if row.framework == "torch":
            if dtype is None:
                out.append(ResolvedDefault(row, None, "depends on the input dtype: give --dtype"))
            else:
                eps, why = torch_default_eps(dtype, torch_version)
                out.append(ResolvedDefault(row, eps, why))
        elif row.eps is None:
            out.append(ResolvedDefault(row, None, row.rule))
        else:
            out.append(ResolvedDefault(row, row.eps, "fixed default (does not depend on dtype)"))
    return DefaultsResult(framework, dtype, torch_version, tuple(out))

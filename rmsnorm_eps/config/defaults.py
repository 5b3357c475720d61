"""Framework default eps: the table, and the one number a given framework/dtype/version uses.

torch's eps=None is the machine epsilon 2**-p of a float type with p fraction bits
(float16 p=10, bfloat16 p=7, float32 p=23, float64 p=52): since PR 142848 (first in torch 2.7)
the compute (opmath) type's, i.e. float32's for float16/bfloat16/float32 inputs; before it the
input dtype's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rmsnorm_eps.config.defaults_table import FRAMEWORK_DEFAULTS, FrameworkDefault
from rmsnorm_eps.errors import ConfigError, InvalidParameterError

__all__ = [
    "DTYPES",
    "MACHINE_EPS",
    "ROW_NAMES",
    "DefaultsResult",
    "FrameworkEps",
    "ResolvedDefault",
    "framework_defaults",
    "framework_eps",
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
#: The unique row names, in table order (``compare --to framework=NAME``).
ROW_NAMES = tuple(r.name for r in FRAMEWORK_DEFAULTS)


@dataclass(frozen=True)
class ResolvedDefault:
    """The eps one API uses for the given dtype/version, or None with the reason."""

    row: FrameworkDefault
    eps: float | None
    explanation: str


@dataclass(frozen=True)
class DefaultsResult:
    """Rows of the defaults table, resolved for an optional dtype and torch version."""

    command: ClassVar[str] = "defaults"  # names its reporter (rmsnorm_eps.reports)

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


def _check_dtype(dtype: str | None) -> None:
    if dtype is not None and dtype not in _FRACTION_BITS:
        raise InvalidParameterError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def _row_eps(
    row: FrameworkDefault, dtype: str | None, torch_version: str | None
) -> tuple[float | None, str]:
    """The eps of ``row`` for ``dtype`` inputs and how it was resolved (None: no number)."""
    if row.framework == "torch":
        if dtype is None:
            return None, "depends on the input dtype: give --dtype"
        return torch_default_eps(dtype, torch_version)
    if row.eps is None:
        return None, row.rule
    return row.eps, "fixed default (does not depend on dtype)"


def torch_default_eps(dtype: str, torch_version: str | None = None) -> tuple[float, str]:
    """eps used by torch.nn.RMSNorm / F.rms_norm with eps=None for ``dtype`` inputs.

    From 2.7 (or when no version is given: current torch): 2**-p of the compute type
    (float32 for half inputs). Before 2.7: 2**-p of the input dtype.
    """
    _check_dtype(dtype)
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
    _check_dtype(dtype)
    if torch_version is not None:
        _parse_version(torch_version)
    rows = _rows(framework) if framework is not None else list(FRAMEWORK_DEFAULTS)
    out = [ResolvedDefault(row, *_row_eps(row, dtype, torch_version)) for row in rows]
    return DefaultsResult(framework, dtype, torch_version, tuple(out))


def _rows(framework: str) -> list[FrameworkDefault]:
    """The rows named ``framework`` (a row name such as hf-llama, or a framework such as
    transformers that may have several rows); InvalidParameterError when none."""
    key = framework.strip().lower()
    rows = [r for r in FRAMEWORK_DEFAULTS if key in (r.name, r.framework)]
    if not rows:
        groups = sorted({r.framework for r in FRAMEWORK_DEFAULTS} - set(ROW_NAMES))
        raise InvalidParameterError(
            f"unknown framework {framework!r}; known: {', '.join(ROW_NAMES)} "
            f"(and {', '.join(groups)} for all its rows)"
        )
    return rows


@dataclass(frozen=True)
class FrameworkEps:
    """One framework default resolved to a number, and where ``q + eps`` is formed.

    ``explanation`` says how the number and the precision were resolved (the row's api and
    source are in ``row``).

    ``compute_dtype`` is float32 where the row documents a float32 (or opmath) reduction for
    this input dtype, float64 for float64 opmath, and None where the table does not know it.
    """

    row: FrameworkDefault
    input_dtype: str | None
    eps: float
    compute_dtype: str | None
    explanation: str


def framework_eps(
    framework: str, dtype: str | None = None, torch_version: str | None = None
) -> FrameworkEps:
    """The one default eps of row ``framework`` for ``dtype`` inputs (the table's number).

    torch needs ``dtype`` (its eps=None depends on it); a row without a number (llama.cpp) and
    a name with several rows (transformers, apex as a group) are ConfigErrors: nothing is
    guessed. The compute precision is ``reduction`` (opmath: float64 for float64 inputs, else
    float32; it needs ``dtype``).
    """
    _check_dtype(dtype)
    rows = _rows(framework)
    rows = [r for r in rows if r.name == framework.strip().lower()] or rows
    if len(rows) > 1:
        listed = ", ".join(f"{r.name} ({r.api})" for r in rows)
        raise ConfigError(f"framework={framework} has several defaults; pick one: {listed}")
    (row,) = rows
    eps, why = _row_eps(row, dtype, torch_version)
    if eps is None and row.name == "torch":
        raise ConfigError(
            "framework=torch: the default eps depends on the input dtype "
            "(1.1920929e-07 for float16/bfloat16/float32, 2.22e-16 for float64): add dtype="
        )
    if eps is None:
        raise ConfigError(f"framework={row.name}: {row.rule}; give eps= explicitly")
    compute: str | None = None
    if row.reduction == "float32":
        compute = "float32"
    elif row.reduction == "opmath" and dtype is not None:
        compute = _OPMATH[dtype]
    if compute is None:
        missing = "input dtype not given" if row.reduction == "opmath" else "not in the table"
        why += f"; compute precision {missing}: modelled as exact float64"
    else:
        why += f"; q + eps formed in {compute}"
    return FrameworkEps(row, dtype, eps, compute, why)

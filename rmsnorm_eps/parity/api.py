"""Parity of an RMSNorm implementation against the float64 reference on the probe set.

``compare_outputs`` judges outputs already computed (the CLI's path); ``check_parity`` runs a
numpy function on fresh probes (the test-suite path). Both return a :class:`ParityResult`:
per-category errors under the chosen rule, the inferred eps/placement/gain, a one-line
diagnosis and the verdict (pass only when every element of every category passes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from rmsnorm_eps.dtypes import coarser, name_of, numpy_dtype
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.parity.diagnose import diagnose
from rmsnorm_eps.parity.infer import Inference, infer
from rmsnorm_eps.parity.probe_set import CATEGORIES, ProbeSet
from rmsnorm_eps.parity.probes import ProbeFields, make_probes
from rmsnorm_eps.parity.rules import CategoryResult, Tolerance, compare, resolve_tolerance

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ParityResult", "check_parity", "compare_outputs"]


@dataclass(frozen=True)
class ParityResult:
    """Everything the report and the acceptance record show. ``output_dtype`` is the dtype
    the outputs arrived in; ``judged_dtype`` the coarser of it and the probe dtype (it sets
    the torch defaults and the rounding assumed by the inference)."""

    command: ClassVar[str] = "parity"  # names its reporter (rmsnorm_eps.reports)

    probes: ProbeSet
    probe_source: str
    actual_source: str
    output_dtype: str
    judged_dtype: str
    tolerance: Tolerance
    categories: tuple[CategoryResult, ...]
    inference: Inference
    diagnosis: str
    probe_sha256: str | None = None
    actual_sha256: str | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.categories)

    @property
    def failing_categories(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.categories if not c.passed)

    @property
    def failing_elements(self) -> int:
        return sum(c.failing for c in self.categories)

    @property
    def nonfinite(self) -> int:
        return sum(c.nan + c.inf for c in self.categories)


def _as_outputs(actual: np.ndarray, probes: ProbeSet, where: str) -> np.ndarray:
    arr = np.asarray(actual)
    want = (probes.count, probes.dim)
    if arr.size != probes.count * probes.dim or arr.ndim < 1 or arr.shape[-1] != probes.dim:
        raise InputFileError(where, f"outputs have shape {arr.shape}, the probes need {want}")
    return arr.reshape(want).astype(np.float64)


def compare_outputs(
    probes: ProbeSet,
    actual: np.ndarray,
    *,
    output_dtype: str,
    rule: str = "torch",
    atol: float | None = None,
    rtol: float | None = None,
    probe_source: str = "<memory>",
    actual_source: str = "<memory>",
) -> ParityResult:
    """Judge ``actual`` (n, d) against the probe set's reference outputs."""
    values = _as_outputs(actual, probes, actual_source)
    judged = coarser(probes.dtype, output_dtype)
    tol = resolve_tolerance(rule, judged, atol, rtol)
    categories = compare(probes.reference, values, tol, probes.category, CATEGORIES)
    inference = infer(probes, values, judged)
    return ParityResult(
        probes=probes,
        probe_source=probe_source,
        actual_source=actual_source,
        output_dtype=output_dtype,
        judged_dtype=judged,
        tolerance=tol,
        categories=categories,
        inference=inference,
        diagnosis=diagnose(categories, inference, probes.dim, probes.norm),
    )


def check_parity(
    fn: Callable[[np.ndarray], np.ndarray],
    *,
    dim: int,
    eps: float,
    rule: str = "torch",
    atol: float | None = None,
    rtol: float | None = None,
    with_weight: bool = False,
    **probe: Unpack[ProbeFields],
) -> ParityResult:
    """Build probes, call ``fn(inputs)`` (or ``fn(inputs, weight)``) once and judge its output.

    The probe keywords (``dtype``, ``gain``, ``gain_convention``, ``seed``, ``delta``,
    ``norm``, ``bias``) are :class:`~rmsnorm_eps.parity.probes.ProbeOptions`' fields.
    ``fn`` receives the probe inputs as an (n, dim) array of ``dtype`` (bfloat16 as an
    ml_dtypes array) and must return an (n, dim) float array. With ``with_weight=True`` fn
    also receives the weight (d,) in ``dtype`` (needed for ``gain='random'``, whose values
    come from the seed) and, for a LayerNorm (``norm="layer"``), the bias:
    ``fn(inputs, weight, bias)``. The output is judged under ``rule`` (``atol``/``rtol``
    override its tolerances).
    """
    probes = make_probes(dim, eps, **probe)
    dtype = probes.dtype
    np_dtype = numpy_dtype(dtype)
    x = probes.inputs.astype(np_dtype)
    params = [probes.weight] + ([probes.bias] if probes.bias is not None else [])
    raw = fn(x, *(p.astype(np_dtype) for p in params)) if with_weight else fn(x)
    out = np.asarray(raw)
    if out.size != probes.count * probes.dim or out.ndim < 1 or out.shape[-1] != probes.dim:
        raise InvalidParameterError(
            f"fn returned shape {out.shape}; the probes need ({probes.count}, {probes.dim})"
        )
    out_name = name_of(out.dtype)
    if out_name is None:
        raise InvalidParameterError(f"fn returned dtype {out.dtype}; expected a float array")
    return compare_outputs(
        probes,
        out,
        output_dtype=out_name,
        rule=rule,
        atol=atol,
        rtol=rtol,
        probe_source="check_parity",
        actual_source="fn",
    )

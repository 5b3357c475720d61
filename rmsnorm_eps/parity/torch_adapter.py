"""Parity of a torch module or tensor function (extra ``[torch]``).

The probe inputs are handed to torch as tensors of the probe dtype (values exactly
representable, so nothing is rounded on the way in); outputs are widened to float64 exactly
(bfloat16 -> float32 -> float64) and judged with the output's own dtype recorded, so the
torch.testing defaults and the inference use the right rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rmsnorm_eps.dtypes import FORMATS
from rmsnorm_eps.errors import InvalidParameterError, MissingExtraError
from rmsnorm_eps.parity.api import ParityResult, compare_outputs
from rmsnorm_eps.parity.probes import ProbeFields, make_probes

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["check_parity_torch", "run_torch"]


def run_torch(fn: Callable[[Any], Any], inputs: np.ndarray, dtype: str) -> tuple[np.ndarray, str]:
    """Call ``fn`` on ``inputs`` as a torch tensor of ``dtype`` under ``torch.no_grad()``.

    Returns the output widened to float64 and the name of its torch dtype.
    """
    try:
        import torch
    except ImportError:
        raise MissingExtraError("torch", "torch", "the torch adapter") from None
    if dtype not in FORMATS:
        raise InvalidParameterError(f"dtype must be one of {', '.join(FORMATS)}")
    x = torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float64)).to(getattr(torch, dtype))
    with torch.no_grad():
        y = fn(x)
    if not isinstance(y, torch.Tensor):
        raise InvalidParameterError(f"the module returned {type(y).__name__}, not a tensor")
    name = str(y.dtype).removeprefix("torch.")
    if name not in FORMATS:
        raise InvalidParameterError(f"the module returned dtype {y.dtype}, not a float dtype")
    out = y.detach().to("cpu").to(torch.float64).numpy()
    return out, name


def check_parity_torch(
    module: Callable[[Any], Any],
    *,
    eps: float,
    dim: int | None = None,
    rule: str = "torch",
    atol: float | None = None,
    rtol: float | None = None,
    **probe: Unpack[ProbeFields],
) -> ParityResult:
    """Check an ``nn.Module`` (e.g. ``torch.nn.RMSNorm(d, eps=None)``) or a tensor function.
    The probe keywords (``dtype``, default float32, ``gain``, ``gain_convention``, ``seed``,
    ``delta``, ``norm``, ``bias``) are :class:`~rmsnorm_eps.parity.probes.ProbeOptions`'
    fields; ``rule``, ``atol`` and ``rtol`` choose the tolerance.

    ``dim`` defaults to the module's ``normalized_shape`` (1-D). ``gain`` must be the weight
    the module holds: 'ones' for a freshly built module, or the array
    ``module.weight.detach().float().numpy()``. The module is run in the probe ``dtype``
    (cast it first, e.g. ``module.to(torch.bfloat16)``). ``norm="layer"`` checks a LayerNorm
    (``torch.nn.LayerNorm(d, eps=...)``) against the float64 LayerNorm reference; ``bias`` must
    then be the beta the module holds ('zeros' for a fresh module, or its array).
    """
    if dim is None:
        shape = getattr(module, "normalized_shape", None)
        if shape is None or len(tuple(shape)) != 1:
            raise InvalidParameterError("give dim= (the module has no 1-D normalized_shape)")
        dim = int(next(iter(shape)))
    probes = make_probes(dim, eps, **probe)
    out, out_dtype = run_torch(module, probes.inputs, probes.dtype)
    return compare_outputs(
        probes,
        out,
        output_dtype=out_dtype,
        rule=rule,
        atol=atol,
        rtol=rtol,
        probe_source="check_parity_torch",
        actual_source=type(module).__name__,
    )

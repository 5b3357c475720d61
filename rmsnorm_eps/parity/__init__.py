"""Parity of an RMSNorm implementation with the float64 reference.

Probe inputs cover the regions where eps matters (:mod:`.probes`), outputs are judged with an
explicit error rule and a separate nonfinite check (:mod:`.rules`), the effective eps, its
placement and the gain convention are inferred from the outputs (:mod:`.infer`), and the
result becomes a one-line diagnosis and a reviewable acceptance record (:mod:`.record`).

Entry points: :func:`rmsnorm_eps.parity.api.check_parity` (a numpy function),
:func:`rmsnorm_eps.parity.torch_adapter.check_parity_torch` (an nn.Module or tensor function),
:func:`rmsnorm_eps.parity.api.compare_outputs` (outputs already computed).
"""

from __future__ import annotations

from rmsnorm_eps.parity.api import ParityResult, check_parity, compare_outputs
from rmsnorm_eps.parity.probe_file import load_probes, write_probes
from rmsnorm_eps.parity.probe_set import ProbeSet
from rmsnorm_eps.parity.probes import make_probes

__all__ = [
    "ParityResult",
    "ProbeSet",
    "check_parity",
    "compare_outputs",
    "load_probes",
    "make_probes",
    "write_probes",
]

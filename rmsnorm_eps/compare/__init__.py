"""Migration what-if: compare two epsilon settings (value, placement, precision, input scale).

For the same input ``x`` and gain, two RMSNorm variants differ by a common per-input factor that
depends only on ``q = mean(x**2)``: ``factor = y_to / y_from = den_from(q) / den_to(q)``. The
modules: :mod:`~rmsnorm_eps.compare.spec` (parsing ``eps=1e-6,placement=outside`` and framework
defaults), :mod:`~rmsnorm_eps.compare.factor` (denominators and factors),
:mod:`~rmsnorm_eps.compare.analysis` (a dump, streamed, per layer) and
:mod:`~rmsnorm_eps.compare.precision` (eps as stored in each dtype, absorption, overflow); IEEE
rounding to float16/bfloat16/float32 is the package's one dtype module,
:mod:`rmsnorm_eps.dtypes`. Nothing here prints or exits.
"""

from __future__ import annotations

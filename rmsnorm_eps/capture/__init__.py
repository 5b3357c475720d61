"""Capture, at every norm module of a torch model, the quantity it divides by (extra ``[torch]``).

* :class:`QCapture` (:mod:`rmsnorm_eps.capture.hooks`): a context manager that records, at every
  norm module, per token (and per head or group, and per call) the quantity it divides by, with
  position and batch index, plus each module's live eps, dim, gain convention and weight stats;
  summary-only, it keeps the analyzer's bounded-memory accumulators instead, which
  :func:`summary_report` turns into the ``ratio`` report and :func:`write_summary` writes as
  the mergeable summary that ``rmsnorm-eps merge`` reads.
* :func:`reduce_across_ranks` merges summary reports over torch.distributed ranks;
  :func:`write_reduced_summary` does that and writes one file from rank 0.
* :func:`write_dump`, :func:`write_config` write a full capture.

Importing this package imports neither torch nor transformers; the functions do.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CaptureError",
    "CaptureResult",
    "ModuleRecord",
    "QCapture",
    "load_model",
    "reduce_across_ranks",
    "run_texts",
    "summary_report",
    "write_config",
    "write_dump",
    "write_reduced_summary",
    "write_summary",
]

_WHERE = {
    "CaptureError": "rmsnorm_eps.capture.errors",
    "CaptureResult": "rmsnorm_eps.capture.records",
    "ModuleRecord": "rmsnorm_eps.capture.records",
    "QCapture": "rmsnorm_eps.capture.hooks",
    "load_model": "rmsnorm_eps.capture.loading",
    "run_texts": "rmsnorm_eps.capture.loading",
    "reduce_across_ranks": "rmsnorm_eps.capture.distributed",
    "summary_report": "rmsnorm_eps.capture.report",
    "write_config": "rmsnorm_eps.capture.output",
    "write_dump": "rmsnorm_eps.capture.output",
    "write_summary": "rmsnorm_eps.merge",
    "write_reduced_summary": "rmsnorm_eps.capture.distributed",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(name)

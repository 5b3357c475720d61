"""What an eps change does to a real model's outputs (extra ``[torch]``).

:func:`~rmsnorm_eps.sensitivity.run.measure` runs texts through a causal language model as it
is (the base) and with eps changed (``--eps`` values set in every norm's eps attribute, or
``--from``/``--to`` SPECs computed by a replacement forward), in every norm at once, one norm at
a time (``per_norm``) or one role at a time (``per_role``), and returns a frozen
:class:`~rmsnorm_eps.sensitivity.result.SensitivityResult`: per position class (position 0 and
positions >= 1) the mean next-token KL(base || new), top-1 agreement, max |delta logit|,
last-token NMSE and perplexity (see :mod:`rmsnorm_eps.sensitivity.metrics`).

Importing this package imports neither torch nor transformers; the functions do.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Change",
    "ChangeResult",
    "Metrics",
    "NormInfo",
    "NormRow",
    "PassCount",
    "SensitivityGate",
    "SensitivityResult",
    "Suggestion",
    "evaluate_gate",
    "measure",
]

_WHERE = {
    "Change": "rmsnorm_eps.sensitivity.result",
    "ChangeResult": "rmsnorm_eps.sensitivity.result",
    "Metrics": "rmsnorm_eps.sensitivity.result",
    "NormInfo": "rmsnorm_eps.sensitivity.result",
    "NormRow": "rmsnorm_eps.sensitivity.result",
    "PassCount": "rmsnorm_eps.sensitivity.result",
    "SensitivityGate": "rmsnorm_eps.sensitivity.result",
    "SensitivityResult": "rmsnorm_eps.sensitivity.result",
    "Suggestion": "rmsnorm_eps.sensitivity.result",
    "evaluate_gate": "rmsnorm_eps.sensitivity.result",
    "measure": "rmsnorm_eps.sensitivity.run",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(name)

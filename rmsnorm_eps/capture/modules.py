"""Which modules of a torch model may be norms, and what epsilon and gain they really use.

A module is a candidate when it is a ``torch.nn.RMSNorm`` or ``torch.nn.LayerNorm``; or it has
no child modules and its class name contains "Norm" (LlamaRMSNorm, Gemma3RMSNorm, T5LayerNorm,
OlmoLayerNorm, Llama4TextL2Norm, MambaRMSNormGated, ...) or it has an ``eps``,
``variance_epsilon`` or ``epsilon`` attribute; or it is a wrapper norm: its class name
contains "Norm", it has an eps attribute, and no module inside it is a candidate (I-BERT's
``IntLayerNorm`` holds a ``QuantAct`` child, yet it is the module that normalizes); or the
user named it. What each candidate
computes (RMSNorm, LayerNorm, gated RMSNorm, L2 norm or unknown) is then found by running it on
a probe (:mod:`rmsnorm_eps.capture.classify`), not from its name.

The epsilon reported is the one the forward pass adds: the attribute's current value, read when
the module runs (not a config file's value). ``torch.nn.RMSNorm(eps=None)`` stores no number;
torch then uses the machine epsilon of the type it computes in. That type changed around
January 2025 (pytorch PR 142848), so it is not assumed: :func:`resolve_torch_default_eps` runs
``torch.nn.functional.rms_norm(eps=None)`` on a probe vector and keeps the candidate
(the input dtype's own epsilon, or float32's) that reproduces the output.
"""

from __future__ import annotations

import fnmatch
import inspect
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from rmsnorm_eps.capture.classify import EPS_ATTRS
from rmsnorm_eps.capture.errors import CaptureError

__all__ = [
    "NormModule",
    "find_norm_modules",
    "gain_convention",
    "resolve_torch_default_eps",
    "weight_stats",
]

# ``1 + self.weight`` / ``1.0 + self.weight.float()`` in a forward's source: a (1 + w) gain.
_ONE_PLUS_W = re.compile(r"\b1(?:\.0*)?\s*\+\s*self\.weight\b")


@dataclass(frozen=True)
class NormModule:
    """A hooked module. ``kind`` says why it is a candidate: 'torch.nn.RMSNorm',
    'torch.nn.LayerNorm', 'RMSNorm-like', 'T5LayerNorm', 'named *Norm*', 'eps attribute' or
    'listed' (what it computes is found later, by :mod:`rmsnorm_eps.capture.classify`).

    ``norm_ndim`` is the number of trailing axes normalized (torch's normalized_shape may have
    several); ``gain`` is 'w', '1+w' or 'none' (no weight).
    """

    name: str
    class_name: str
    kind: str
    norm_ndim: int
    gain: str


def gain_convention(module: Any) -> str:
    """'1+w' when the class's forward multiplies by ``1 + weight`` (Gemma family), 'w' when it
    has a weight, 'none' without one. Read from the forward's source; when no source is
    available, Gemma class names are taken to use 1+w (all HF Gemma/Gemma2/Gemma3 RMSNorms do).
    """
    weight = getattr(module, "weight", None)
    if weight is None:
        return "none"
    try:
        source = inspect.getsource(type(module).forward)
    except (OSError, TypeError):
        return "1+w" if type(module).__name__.startswith("Gemma") else "w"
    return "1+w" if _ONE_PLUS_W.search(source) else "w"


def _classify(name: str, module: Any, listed: bool, holds_norm: bool) -> NormModule | None:
    """A candidate's selection reason (``kind``), or None when it is no candidate.
    ``holds_norm``: a module inside this one is a candidate."""
    import torch

    cls = type(module).__name__
    leaf = next(iter(module.children()), None) is None
    ndim = 1
    if isinstance(module, torch.nn.RMSNorm | torch.nn.LayerNorm):
        ndim = len(module.normalized_shape)
    if isinstance(module, torch.nn.RMSNorm):
        return NormModule(name, cls, "torch.nn.RMSNorm", ndim, gain_convention(module))
    if listed:
        kind = "listed"
    elif isinstance(module, torch.nn.LayerNorm):
        kind = "torch.nn.LayerNorm"
    elif not leaf and not _wrapper_norm(cls, module, holds_norm):
        return None
    elif "RMSNorm" in cls:
        kind = "RMSNorm-like"
    elif cls.endswith("T5LayerNorm"):
        kind = "T5LayerNorm"
    elif "Norm" in cls:
        kind = "named *Norm*"
    elif any(hasattr(module, attr) for attr in EPS_ATTRS):
        kind = "eps attribute"
    else:
        return None
    return NormModule(name, cls, kind, ndim, gain_convention(module))


def _wrapper_norm(cls: str, module: Any, holds_norm: bool) -> bool:
    """A module with children that is itself the norm (see the module docstring)."""
    return "Norm" in cls and not holds_norm and any(hasattr(module, a) for a in EPS_ATTRS)


def find_norm_modules(model: Any, names: Sequence[str] = ()) -> list[NormModule]:
    """The candidate norm modules of ``model`` in ``named_modules()`` order.

    ``names`` are extra module names or globs (fnmatch) to hook; each must match a module.
    """
    named = list(model.named_modules())
    listed: set[str] = set()
    for pattern in names:
        hits = [n for n, _ in named if n and fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise CaptureError(f"no module named {pattern!r} in the model")
        listed.update(hits)
    found: dict[str, NormModule] = {}
    holders: set[str] = set()  # modules with a candidate inside them
    for name, module in reversed(named):  # children before their parents
        if not name:
            continue
        spec = _classify(name, module, name in listed, name in holders)
        if spec is not None:
            found[name] = spec
            parts = name.split(".")
            holders.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return [found[name] for name, _ in named if name in found]


@cache
def resolve_torch_default_eps(dtype_name: str) -> float:
    """The epsilon ``torch.nn.functional.rms_norm(eps=None)`` uses for inputs of ``dtype_name``.

    Candidates: ``finfo(dtype).eps`` and ``finfo(float32).eps`` (float64: its own). A probe
    ``x = c * ones(8)`` with ``c**2`` near the candidates gives ``y = c / sqrt(c**2 + eps)``,
    which differs between them by far more than the dtype's rounding; the candidate whose
    prediction is closest to the live output is returned.
    """
    import torch

    dtype = getattr(torch, dtype_name)
    own = float(torch.finfo(dtype).eps)
    f32 = float(torch.finfo(torch.float32).eps)
    candidates = sorted({own, f32})
    if len(candidates) == 1:
        return candidates[0]
    c_val = math.sqrt(math.sqrt(candidates[0] * candidates[1]))  # c**2 between the two
    x = torch.full((8,), c_val, dtype=dtype)
    y = torch.nn.functional.rms_norm(x, (8,), eps=None)
    c = float(x[0].double())
    got = float(y[0].double())
    best = min(candidates, key=lambda e: abs(c / math.sqrt(c * c + e) - got))
    return best


def weight_stats(module: Any) -> dict[str, float] | None:
    """min, max, mean and mean |w| of the module's stored weight (float64), or None."""
    import torch

    weight = getattr(module, "weight", None)
    if weight is None or not isinstance(weight, torch.Tensor) or weight.numel() == 0:
        return None
    w = weight.detach().to(torch.float64)
    return {
        "min": float(w.min()),
        "max": float(w.max()),
        "mean": float(w.mean()),
        "mean_abs": float(w.abs().mean()),
    }


def iter_named(model: Any, specs: Iterable[NormModule]) -> Iterable[tuple[NormModule, Any]]:
    """Pair each spec with its module."""
    modules = dict(model.named_modules())
    for spec in specs:
        yield spec, modules[spec.name]

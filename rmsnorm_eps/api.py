"""Check q (or activations) in memory: numpy arrays, torch tensors, or dicts of them.

``check(data, eps=...)`` runs the same analysis as ``rmsnorm-eps ratio`` and returns
:class:`EpsCheck`: the frozen :class:`~rmsnorm_eps.analysis.RatioReport` the CLI prints, the
gate's verdict, and :meth:`EpsCheck.render` for any of the six formats. A torch tensor stays
on its device: with ``raw=True`` q = mean(x^2) over the last axis is computed there in
float64, a block of rows at a time, and only q crosses to the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict

from rmsnorm_eps.errors import InvalidParameterError

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Unpack

    from rmsnorm_eps.analysis import RatioReport
    from rmsnorm_eps.gate import GateResult

__all__ = ["CheckFields", "CheckOptions", "EpsCheck", "check"]

#: rows of a torch tensor squared at once on its device (bounds the float64 copy)
_TORCH_ROWS = 1 << 16


@dataclass(frozen=True)
class EpsCheck:
    """What :func:`check` found: ``report`` (as ``ratio`` prints it) and ``gate``."""

    report: RatioReport
    gate: GateResult

    @property
    def passed(self) -> bool:
        """True when the violations fit the budget (none by default)."""
        return self.gate.passed

    @property
    def violations(self) -> int:
        """Inputs below the bound plus nonfinite ones."""
        return self.report.violations

    def render(self, fmt: str = "text") -> str:
        """The report in ``fmt`` (text, json, markdown, github, junit, sarif), as the CLI
        writes it (no colour)."""
        from rmsnorm_eps.reports import RenderOptions, render

        return render(self.report, fmt, RenderOptions(gate=self.gate, histogram="none"))

    def __str__(self) -> str:
        return self.render("text")


def _is_torch(value: object) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def _torch_q(tensor: Any, raw: bool, norm: str) -> np.ndarray:
    """q (or v) of a torch tensor, computed on its device in float64; only q moves."""
    import numpy as np
    import torch

    t = tensor.detach()
    if not raw:
        return np.asarray(t.to(torch.float64).cpu().numpy())
    if t.ndim < 1 or t.shape[-1] == 0:
        raise InvalidParameterError(
            f"raw=True needs activations of shape (..., d), got {tuple(t.shape)}"
        )
    rows = t.reshape(-1, t.shape[-1])
    parts = []
    for start in range(0, rows.shape[0], _TORCH_ROWS):
        x = rows[start : start + _TORCH_ROWS].to(torch.float64)
        if norm == "layer":
            x = x - x.mean(dim=-1, keepdim=True)
        parts.append(x.square().mean(dim=-1).cpu())
    q = torch.cat(parts) if parts else torch.empty(0, dtype=torch.float64)
    return np.asarray(q.numpy()).reshape(tuple(t.shape[:-1]))


def _as_arrays(data: object, raw: bool, norm: str) -> tuple[dict[str, np.ndarray], bool]:
    """Layer name -> float array, and whether the arrays still hold activations (numpy data
    with ``raw``: the analysis computes q, exactly as ``ratio --raw``)."""
    import numpy as np

    items = list(data.items()) if isinstance(data, Mapping) else [("q", data)]
    if not items:
        raise InvalidParameterError("no layer to check: the mapping is empty")
    out: dict[str, np.ndarray] = {}
    torch_raw = False
    for name, value in items:
        if not isinstance(name, str) or not name:
            raise InvalidParameterError(f"layer names must be non-empty strings, got {name!r}")
        if _is_torch(value):
            out[name] = _torch_q(value, raw, norm)
            torch_raw = torch_raw or raw
            continue
        array = np.asarray(value)
        if array.dtype.kind != "f":
            raise InvalidParameterError(
                f"{name}: values must be floating point (float16/32/64), got {array.dtype}"
            )
        out[name] = array
    if raw and torch_raw and len(set(map(_is_torch, (v for _, v in items)))) > 1:
        raise InvalidParameterError("raw=True: give every layer as a torch tensor, or none")
    return out, raw and not torch_raw


@dataclass(frozen=True)
class CheckOptions:
    """How :func:`check` reads and judges the data: ``raw`` (activations x of shape
    ``(..., d)``, q = mean(x^2) over the last axis), the bound (``delta``, default 0.01, or
    ``min_ratio`` = q/eps directly), the ``norm`` ('rms', or 'layer': the variance v in place
    of q), ``top_k`` worst inputs kept per layer, the gate's budget (``max_violations``,
    ``max_fraction``: default none allowed), and ``zero_is_violation`` (a zero vector, q = 0
    exactly, is counted apart by default: its output is 0 under any eps)."""

    raw: bool = False
    delta: float | None = None
    min_ratio: float | None = None
    norm: str = "rms"
    top_k: int = 5
    max_violations: int | None = None
    max_fraction: float | None = None
    zero_is_violation: bool = False


class CheckFields(TypedDict, total=False):
    """:class:`CheckOptions`' fields as keyword arguments (``check(x, eps=1e-6, raw=True)``)."""

    raw: bool
    delta: float | None
    min_ratio: float | None
    norm: str
    top_k: int
    max_violations: int | None
    max_fraction: float | None
    zero_is_violation: bool


def check(
    data: object, eps: float | Mapping[str, float], **fields: Unpack[CheckFields]
) -> EpsCheck:
    """Check q values (or, with ``raw``, activations x of shape ``(..., d)``) against the bound
    ``A = sqrt(q/(q+eps)) >= 1 - delta`` (default delta 0.01: q/eps >= 49.2512562814).

    ``data``: a numpy array or torch tensor (one layer, named ``q``) or a mapping of layer
    name -> array/tensor. ``eps``: one value, or one per layer name. The keywords are
    :class:`CheckOptions`' fields. Violations are inputs with ``q/eps < min_ratio`` and every
    NaN or inf; the gate passes when they fit ``max_violations``/``max_fraction`` (default:
    none allowed), as in ``rmsnorm-eps ratio``.
    """
    o = CheckOptions(**fields)
    raw, norm = o.raw, o.norm
    from pathlib import Path

    from rmsnorm_eps.analysis import analyze_dump
    from rmsnorm_eps.dumps import MEMORY_LABEL, DumpReading
    from rmsnorm_eps.gate import evaluate_gate
    from rmsnorm_eps.sources.interface import Opened
    from rmsnorm_eps.sources.memory import MemoryArraySource

    arrays, still_raw = _as_arrays(data, raw, norm)
    if isinstance(eps, Mapping):
        missing = [n for n in arrays if n not in eps]
        if missing:
            raise InvalidParameterError(f"no eps for layer(s): {', '.join(missing)}")
        layer_eps: float | dict[str, float] = {n: float(eps[n]) for n in arrays}
    else:
        layer_eps = float(eps)
    label = Path(MEMORY_LABEL)
    sources = [MemoryArraySource(label, name, values) for name, values in arrays.items()]
    report = analyze_dump(
        Opened(sources, [], len(sources)),
        layer_eps,
        delta=o.delta,
        min_ratio=o.min_ratio,
        reading=DumpReading(raw=still_raw, top_k=o.top_k, norm=norm, threads=1),
        zero_is_violation=o.zero_is_violation,
    )
    if raw and not still_raw:  # torch activations: q was computed on their device
        report = replace(report, raw=True)
    return EpsCheck(report, evaluate_gate(report, o.max_violations, o.max_fraction))

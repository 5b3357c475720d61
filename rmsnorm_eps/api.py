"""Check q (or activations) in memory: numpy arrays, torch tensors, or dicts of them.

``check(data, eps=...)`` runs the same analysis as ``rmsnorm-eps ratio`` and returns
:class:`EpsCheck`: the frozen :class:`~rmsnorm_eps.analysis.RatioReport` the CLI prints, the
gate's verdict, the CLI's shape warnings (:attr:`EpsCheck.warnings`) and
:meth:`EpsCheck.render` for any of the six formats. A torch tensor stays on its device: with
``raw=True`` q = mean(x^2) over the last axis is computed there in float64, a block of rows at
a time, and only q crosses to the host.

Inputs follow the CLI's rules: float16, float32 or float64 values (a torch tensor may also be
bfloat16, as a stored bfloat16 tensor is read); integer, bool, complex and other arrays or
tensors are refused, and so is an eps that is not one real number (None, a string, an array,
True). Every such refusal is one :class:`~rmsnorm_eps.errors.InvalidInput`
(``rmsnorm_eps.InvalidInput``, a ValueError) naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard

from rmsnorm_eps.errors import InputFileError, InvalidInput, InvalidParameterError

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Unpack

    from rmsnorm_eps.analysis import RatioReport
    from rmsnorm_eps.gate import GateResult
    from rmsnorm_eps.sources.intent import InputWarning

__all__ = ["CheckFields", "CheckOptions", "EpsCheck", "check"]

#: The source a report of arrays in memory names (as :data:`rmsnorm_eps.dumps.MEMORY_LABEL`).
MEMORY_LABEL = "<memory>"

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

    @property
    def warnings(self) -> tuple[InputWarning, ...]:
        """The layers whose shape suggests a different question, as ``ratio`` warns (a q array
        shaped like activations without ``raw``, a 1-D array with ``raw``); each has
        ``.message``. The analysis still ran."""
        return self.report.warnings

    def render(self, fmt: str = "text") -> str:
        """The report in ``fmt`` (text, json, markdown, github, junit, sarif), as the CLI
        writes it (no colour)."""
        from rmsnorm_eps.reports import RenderOptions, render

        return render(self.report, fmt, RenderOptions(gate=self.gate, histogram="none"))

    def __str__(self) -> str:
        return self.render("text")


def _is_torch(value: object) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


#: torch dtypes read as the CLI reads stored tensors (float16/32/64, and bfloat16).
_TORCH_FLOATS = ("torch.float16", "torch.bfloat16", "torch.float32", "torch.float64")


def _check_torch_dtype(tensor: Any, argument: str) -> None:
    """Refuse a tensor whose dtype the CLI would refuse in a file (int8, int64, bool,
    complex, float8, ...): float16, bfloat16, float32 and float64 pass."""
    if str(tensor.dtype) not in _TORCH_FLOATS:
        raise InvalidInput(
            argument,
            f"unsupported dtype {tensor.dtype}: expected float16, bfloat16, float32 or float64",
        )


def _check_numpy(value: object, argument: str) -> np.ndarray:
    """``value`` as an array the CLI would read (float16/32/64, either byte order)."""
    import numpy as np

    from rmsnorm_eps.sources.raw import check_float_dtype

    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(argument, f"not an array of numbers ({exc})") from None
    try:
        check_float_dtype(array.dtype, Path(MEMORY_LABEL), None)
    except InputFileError as exc:
        raise InvalidInput(argument, exc.problem) from None
    return array


def _eps_number(value: object, argument: str) -> float:
    """One real eps, finite and > 0: None, a string, a bool, an array or a tensor is refused
    (``float()`` would take "1e-5", True as 1.0 and a one-element array)."""
    if not _is_real(value):
        raise InvalidInput(argument, f"expected one number > 0, got {_shown(value)}")
    value_f = float(value)
    if not math.isfinite(value_f) or value_f <= 0.0:
        raise InvalidInput(argument, f"must be finite and > 0, got {value!r}")
    return value_f


def _shown(value: object) -> str:
    from rmsnorm_eps.errors import brief

    kind = type(value).__name__
    return f"{kind} {brief(value)}" if value is not None else "None"


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
    mapping = isinstance(data, Mapping)
    items = list(data.items()) if isinstance(data, Mapping) else [("q", data)]
    if not items:
        raise InvalidInput("data", "no layer to check: the mapping is empty")
    out: dict[str, np.ndarray] = {}
    torch_raw = False
    for name, value in items:
        if not isinstance(name, str) or not name:
            raise InvalidInput("data", f"layer names must be non-empty strings, got {name!r}")
        argument = f"data[{name!r}]" if mapping else "data"
        if _is_torch(value):
            _check_torch_dtype(value, argument)
            try:
                out[name] = _torch_q(value, raw, norm)
            except InvalidParameterError as exc:
                raise InvalidInput(argument, str(exc)) from None
            torch_raw = torch_raw or raw
            continue
        out[name] = _check_numpy(value, argument)
    if raw and torch_raw and len(set(map(_is_torch, (v for _, v in items)))) > 1:
        raise InvalidInput("data", "raw=True: give every layer as a torch tensor, or none")
    return out, raw and not torch_raw


def _shapes(data: object) -> list[Any]:
    """Each layer's name and the shape of what was given (activations with ``raw``), for the
    CLI's shape warnings (:func:`~rmsnorm_eps.sources.intent.shape_warnings`)."""
    items: list[tuple[str, Any]] = (
        list(data.items()) if isinstance(data, Mapping) else [("q", data)]
    )
    return [
        _Shaped(Path(MEMORY_LABEL), name, tuple(int(k) for k in value.shape))
        for name, value in items
    ]


@dataclass(frozen=True)
class _Shaped:
    path: Path
    key: str
    shape: tuple[int, ...]


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
    try:
        o = CheckOptions(**fields)
    except TypeError as exc:
        raise InvalidInput("options", str(exc)) from None
    raw, norm = o.raw, o.norm
    from rmsnorm_eps.analysis import analyze_dump
    from rmsnorm_eps.dumps import DumpReading
    from rmsnorm_eps.gate import evaluate_gate
    from rmsnorm_eps.sources.intent import shape_warnings
    from rmsnorm_eps.sources.interface import Opened
    from rmsnorm_eps.sources.memory import MemoryArraySource

    _check_options(o)
    arrays, still_raw = _as_arrays(data, raw, norm)
    layer_eps = _layer_eps(eps, arrays)
    label = Path(MEMORY_LABEL)
    sources = [MemoryArraySource(label, name, values) for name, values in arrays.items()]
    try:
        report = analyze_dump(
            Opened(sources, [], len(sources)),
            layer_eps,
            delta=o.delta,
            min_ratio=o.min_ratio,
            reading=DumpReading(raw=still_raw, top_k=o.top_k, norm=norm, threads=1),
            zero_is_violation=o.zero_is_violation,
        )
    except InputFileError as exc:  # a negative q, named by its layer and index
        where = "data" if exc.key is None else f"data[{exc.key!r}]"
        raise InvalidInput(where, exc.problem) from None
    if raw and not still_raw:  # torch activations: q was computed on their device
        report = replace(report, raw=True, warnings=shape_warnings(_shapes(data), raw))
    return EpsCheck(report, evaluate_gate(report, o.max_violations, o.max_fraction))


def _layer_eps(eps: object, arrays: Mapping[str, Any]) -> float | dict[str, float]:
    """One eps for every layer, or one per layer name (each checked by :func:`_eps_number`)."""
    if not isinstance(eps, Mapping):
        return _eps_number(eps, "eps")
    missing = [n for n in arrays if n not in eps]
    if missing:
        raise InvalidInput("eps", f"no eps for layer(s): {', '.join(missing)}")
    return {n: _eps_number(eps[n], f"eps[{n!r}]") for n in arrays}


def _check_options(o: CheckOptions) -> None:
    """Each option refused with its name: the bound, ``norm``, ``top_k`` and the budget."""
    from rmsnorm_eps.analysis import resolve_bound

    for name, value in (("delta", o.delta), ("min_ratio", o.min_ratio)):
        if value is not None and not _is_real(value):
            raise InvalidInput(name, f"expected a number, got {_shown(value)}")
    try:
        resolve_bound(o.delta, o.min_ratio)
    except InvalidParameterError as exc:
        raise InvalidInput("min_ratio" if o.min_ratio is not None else "delta", str(exc)) from None
    if o.norm not in ("rms", "layer"):
        raise InvalidInput("norm", f"expected 'rms' or 'layer', got {_shown(o.norm)}")
    for name, count in (("top_k", o.top_k), ("max_violations", o.max_violations)):
        if count is not None and (not _is_integer(count) or count < 0):
            raise InvalidInput(name, f"expected an integer >= 0, got {_shown(count)}")
    fraction = o.max_fraction
    if fraction is not None and (not _is_real(fraction) or not 0.0 <= fraction <= 1.0):
        raise InvalidInput("max_fraction", f"expected a number in [0, 1], got {_shown(fraction)}")


def _is_real(value: object) -> TypeGuard[float]:
    import numbers

    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool)

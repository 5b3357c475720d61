"""Epsilon settings to compare: ``eps=1e-6,placement=outside,dtype=float16``, a framework
default, or per-layer settings from a model config.

A SPEC is comma-separated ``key=value`` pairs:

* ``eps=E``: the epsilon (float64, > 0).
* ``placement=inside|outside|clamp|sum`` (default inside): the denominator of ``y = x / den`` is
  ``sqrt(q + eps)`` (inside), ``sqrt(q) + eps`` (outside), ``max(sqrt(q), eps)`` (clamp) or
  ``sqrt((d*q + eps) / d) = sqrt(q + eps/d)`` (sum: eps added to the sum of squares; needs
  ``dim=D``).
* ``dtype=float32|float16|bfloat16`` (default: exact float64 arithmetic): the precision in which
  eps is stored and ``q + eps`` is formed (see :mod:`rmsnorm_eps.compare.factor` for the model).
* ``framework=NAME[,dtype=T]``: eps from a row of the framework defaults table
  (:func:`rmsnorm_eps.config.defaults.framework_eps`, the one source of those numbers); here
  ``dtype`` is the INPUT dtype, the compute precision is the row's documented reduction.

The word ``config`` instead of a SPEC takes every layer's settings from a model config
(:func:`specs_from_config`): eps, placement, dim (for sum) and the reduction dtype of the entry
matching the layer's name; the gain does not change the factor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from rmsnorm_eps.config.defaults import framework_eps
from rmsnorm_eps.config.model import NormConfig
from rmsnorm_eps.config.resolve import eps_for_layers
from rmsnorm_eps.errors import ConfigError, InvalidParameterError
from rmsnorm_eps.numerics import validate_eps

__all__ = [
    "COMPUTE_DTYPES",
    "CONFIG_SPEC",
    "PLACEMENTS",
    "EpsSpec",
    "LayerSpecs",
    "is_config_spec",
    "parse_spec",
    "specs_from_config",
    "stored_eps",
    "stored_eps_note",
]

PLACEMENTS = ("inside", "outside", "clamp", "sum")
COMPUTE_DTYPES = ("float64", "float32", "float16", "bfloat16")
_KEYS = ("eps", "placement", "dim", "dtype", "framework")
#: The SPEC word that takes per-layer settings from ``--config``.
CONFIG_SPEC = "config"


def is_config_spec(text: str) -> bool:
    """True for the SPEC ``config`` (per-layer settings from a model config)."""
    return text.strip().lower() == CONFIG_SPEC


@dataclass(frozen=True)
class EpsSpec:
    """One side of a comparison, fully resolved.

    ``dtype`` is the compute precision: ``float64`` means exact float64 arithmetic (no
    rounding modelled); float32/float16/bfloat16 round eps, q and each intermediate.
    :attr:`stored_eps` is eps as that dtype stores it, the value the analysis uses (factor,
    safe-eps verdict and margin); ``note`` says so when the dtype stores it as 0 or inf.
    """

    text: str
    eps: float
    placement: str = "inside"
    dim: int | None = None
    dtype: str = "float64"
    framework: str | None = None
    input_dtype: str | None = None
    note: str | None = None

    @property
    def stored_eps(self) -> float:
        """``R(eps)``: eps rounded to ``dtype`` (ties to even; float64: eps itself)."""
        return stored_eps(self.eps, self.dtype)

    def for_layer(self, name: str) -> EpsSpec:
        """The setting of layer ``name``: this one for every layer."""
        return self

    def describe(self) -> str:
        """A short human-readable form: ``eps=1e-06 inside float64`` (``eps=1e-08 (0 in
        float16)`` when the dtype stores eps as 0 or inf)."""
        stored = self.stored_eps
        vanished = stored == 0.0 or math.isinf(stored)
        shown = f" ({stored:g} in {self.dtype})" if vanished else ""
        parts = [f"eps={self.eps:.8g}{shown}", self.placement]
        if self.dim is not None:
            parts.append(f"d={self.dim}")
        parts.append(self.dtype)
        if self.framework is not None:
            inp = f" {self.input_dtype} input" if self.input_dtype else ""
            parts.append(f"({self.framework} default{inp})")
        return " ".join(parts)


def stored_eps(eps: float, dtype: str) -> float:
    """eps as ``dtype`` stores it: rounded to nearest, ties to even (float64: unchanged)."""
    from rmsnorm_eps.dtypes import round_to

    return eps if dtype == "float64" else float(round_to(eps, dtype))


def stored_eps_note(eps: float, dtype: str) -> str | None:
    """The finding when ``dtype`` stores ``eps`` as 0 (below half its smallest subnormal) or
    as inf (above its largest finite value); None when the stored eps is finite and > 0."""
    from rmsnorm_eps.dtypes import get_format

    stored = stored_eps(eps, dtype)
    if stored == 0.0:
        tiny = get_format(dtype).smallest_subnormal
        return (
            f"eps={eps:.8g} is 0 in {dtype} (its smallest subnormal is {tiny:.6g}): q + eps is "
            "formed with eps 0, so a zero vector's output is 0/0 = NaN"
        )
    if math.isinf(stored):
        big = get_format(dtype).max
        return f"eps={eps:.8g} is inf in {dtype} (its largest finite value is {big:.6g})"
    return None


def _joined(*notes: str | None) -> str | None:
    kept = [n for n in notes if n]
    return "; ".join(kept) if kept else None


def _pairs(text: str, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not value:
            raise InvalidParameterError(f"{option} {text!r}: expected key=value, got {part!r}")
        if key not in _KEYS:
            raise InvalidParameterError(
                f"{option} {text!r}: unknown key {key!r}; keys: {', '.join(_KEYS)}"
            )
        if key in out:
            raise InvalidParameterError(f"{option} {text!r}: {key} given twice")
        out[key] = value
    if not out:
        raise InvalidParameterError(f"{option}: empty SPEC; give e.g. eps=1e-6")
    return out


def _placement(kv: dict[str, str], where: str) -> str:
    placement = kv.get("placement", "inside").lower()
    if placement not in PLACEMENTS:
        raise InvalidParameterError(
            f"{where}: placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}"
        )
    return placement


def _dim(kv: dict[str, str], placement: str, where: str) -> int | None:
    """``dim=D``: only with placement sum, which needs it."""
    dim: int | None = None
    if "dim" in kv:
        try:
            dim = int(kv["dim"])
        except ValueError:
            raise InvalidParameterError(
                f"{where}: dim must be a positive integer, got {kv['dim']!r}"
            ) from None
        if dim <= 0:
            raise InvalidParameterError(f"{where}: dim must be >= 1, got {dim}")
        if placement != "sum":
            raise InvalidParameterError(f"{where}: dim is only used by placement=sum")
    if placement == "sum" and dim is None:
        raise InvalidParameterError(
            f"{where}: placement=sum adds eps to the sum of squares; give dim=D"
        )
    return dim


def _dtype(kv: dict[str, str], where: str) -> str | None:
    """``dtype=`` in any spelling ``--dtype`` accepts (bf16, fp16, fp32, ...), as numpy's name."""
    from rmsnorm_eps.dtypes import canonical_dtype

    dtype = kv.get("dtype")
    if dtype is None:
        return None
    try:
        return canonical_dtype(dtype, COMPUTE_DTYPES)
    except ValueError:
        raise InvalidParameterError(
            f"{where}: dtype must be one of {', '.join(COMPUTE_DTYPES)} (or bf16, fp16, fp32), "
            f"got {dtype!r}"
        ) from None


def _framework_spec(
    text: str, kv: dict[str, str], placement: str, dtype: str | None, where: str
) -> EpsSpec:
    """``framework=NAME[,dtype=T]``: eps and compute precision from the defaults table."""
    if "eps" in kv:
        raise InvalidParameterError(f"{where}: give eps= or framework=, not both")
    if "placement" in kv and placement != "inside":
        raise InvalidParameterError(
            f"{where}: framework defaults put eps inside the square root; "
            "give eps= to model another placement"
        )
    fd = framework_eps(kv["framework"], dtype)
    compute = fd.compute_dtype or "float64"
    return EpsSpec(
        text=text,
        eps=fd.eps,
        placement="inside",
        dim=None,
        dtype=compute,
        framework=fd.row.name,
        input_dtype=dtype,
        note=_joined(f"{fd.row.api}: {fd.explanation}", stored_eps_note(fd.eps, compute)),
    )


def _eps(kv: dict[str, str], where: str) -> float:
    if "eps" not in kv:
        raise InvalidParameterError(f"{where}: give eps=E or framework=NAME")
    try:
        eps_value = float(kv["eps"])
    except ValueError:
        raise InvalidParameterError(f"{where}: eps must be a number, got {kv['eps']!r}") from None
    if not math.isfinite(eps_value) or eps_value <= 0.0:
        raise InvalidParameterError(f"{where}: eps must be finite and > 0")
    return validate_eps(eps_value)


def parse_spec(text: str, option: str = "SPEC") -> EpsSpec:
    """Parse and resolve a SPEC (see the module docstring); ``option`` names it in errors."""
    if is_config_spec(text):
        raise InvalidParameterError(
            f"{option} config takes per-layer settings from a model config: "
            "resolve it with specs_from_config (the CLI's --config FILE)"
        )
    kv = _pairs(text, option)
    where = f"{option} {text!r}"
    placement = _placement(kv, where)
    dim = _dim(kv, placement, where)
    dtype = _dtype(kv, where)
    if "framework" in kv:
        return _framework_spec(text, kv, placement, dtype, where)
    eps = _eps(kv, where)
    return EpsSpec(
        text=text,
        eps=eps,
        placement=placement,
        dim=dim,
        dtype=dtype or "float64",
        note=stored_eps_note(eps, dtype or "float64"),
    )


@dataclass(frozen=True)
class LayerSpecs:
    """``--from config`` / ``--to config``: one :class:`EpsSpec` per dump layer, in dump order."""

    text: str
    config: str
    layers: tuple[tuple[str, EpsSpec], ...]
    # layer name -> its setting (the first, as the layers are listed), made once: looking
    # each layer up in ``layers`` would be quadratic in a dump of 100,000 layers.
    _by_name: dict[str, EpsSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {layer: spec for layer, spec in reversed(self.layers)}  # the first one wins
        object.__setattr__(self, "_by_name", by_name)

    def for_layer(self, name: str) -> EpsSpec:
        """The setting of layer ``name``; a layer the config was not resolved for is an error."""
        spec = self._by_name.get(name)
        if spec is None:
            raise ConfigError(f"{self.config}: no settings resolved for layer {name!r}")
        return spec

    def describe(self) -> str:
        return f"per layer from {self.config}"


def _layers(names: Iterable[str], limit: int = 10) -> str:
    items = list(names)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def specs_from_config(
    config: NormConfig,
    names: Iterable[str],
    option: str = "--from",
    *,
    allow_unmatched: bool = False,
    skipped: Iterable[str] = (),
) -> LayerSpecs:
    """Per-layer settings for the dump layers ``names`` from ``config``, matched as ``ratio
    --config`` matches them (:func:`rmsnorm_eps.config.resolve.eps_for_layers`; ``skipped``:
    the unreadable layers' names, which count as matched).

    Each layer gets the eps, placement and (for placement sum) dim of the config entries its
    name matches, and ``q + eps`` is formed in the config's reduction_dtype when that is
    float32, float16 or bfloat16 (exact float64 when it is float64 or missing). A layer that
    matches no pattern, a missing or conflicting eps or placement, a missing dim under
    placement sum are ConfigErrors: nothing is filled in. A LayerNorm (``norm: layer``) is
    compared like an RMSNorm, on its variance v instead of q (``compare_dump`` takes the
    layer's quantity from the same config).
    """
    names = list(names)
    remedy = f"fix the config or give an explicit SPEC to {option}"
    assigned = eps_for_layers(
        config, names, remedy=remedy, allow_unmatched=allow_unmatched, skipped=skipped
    )
    problems: dict[str, list[str]] = {}
    out: list[tuple[str, EpsSpec]] = []
    for name in names:
        settings = config.settings_for(name)
        assert settings is not None  # eps_for_layers refused unmatched names
        placement = settings.placement
        if not isinstance(placement.value, str):
            problems.setdefault(f"placement is {placement.provenance.describe()}", []).append(name)
            continue
        dim: int | None = None
        if placement.value == "sum":
            if not isinstance(settings.dim.value, int):
                problems.setdefault("placement is sum but dim is missing", []).append(name)
                continue
            dim = settings.dim.value
        reduction = settings.reduction_dtype.value
        dtype = reduction if reduction in ("float32", "float16", "bfloat16") else "float64"
        here = config.path
        parts = [
            f"eps from {settings.eps.provenance.describe(here)}",
            f"placement from {placement.provenance.describe(here)}",
        ]
        if dim is not None:
            parts.append(f"dim from {settings.dim.provenance.describe(here)}")
        if isinstance(reduction, str):
            parts.append(
                f"q + eps in {dtype} (reduction_dtype {reduction} from "
                f"{settings.reduction_dtype.provenance.describe(here)})"
            )
        else:
            parts.append("no reduction_dtype: exact float64")
        out.append(
            (
                name,
                EpsSpec(
                    text=CONFIG_SPEC,
                    eps=validate_eps(assigned.eps[name]),
                    placement=placement.value,
                    dim=dim,
                    dtype=dtype,
                    note=_joined(*parts, stored_eps_note(assigned.eps[name], dtype)),
                ),
            )
        )
    if problems:
        why, layers = next(iter(problems.items()))
        raise ConfigError(
            f"{config.path}: {option} config: {why} for {len(layers)} layer(s): "
            f"{_layers(layers)}; {remedy}"
        )
    return LayerSpecs(text=CONFIG_SPEC, config=config.path, layers=tuple(out))

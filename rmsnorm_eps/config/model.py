"""The normalization-config model: per-norm settings, each value with its provenance.

A norm computes, for x of dimension d and q = mean(x^2) (LayerNorm: the variance after
subtracting the mean), with gain g:

- placement ``inside``:  y = g * x / sqrt(q + eps)
- placement ``outside``: y = g * x / (sqrt(q) + eps)
- placement ``clamp``:   y = g * x / max(sqrt(q), eps)
- placement ``sum``:     y = g * x * sqrt(d) / sqrt(sum(x^2) + eps) = g * x / sqrt(q + eps/d)
- gain ``w``: g = w; gain ``1+w``: g = 1 + w (``gain_baked``: the +1 is already in the stored w)

Nothing is ever filled in silently: each :class:`Resolved` value says where it came from
(a file and key, a framework default with its version range, a derivation, or "missing").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import ClassVar, Literal

from rmsnorm_eps.config.globs import GlobIndex, witness

__all__ = [
    "FIELDS",
    "GAINS",
    "NORMS",
    "PLACEMENTS",
    "ConfigEntry",
    "NormConfig",
    "NormSettings",
    "Provenance",
    "Resolved",
    "missing",
]

PLACEMENTS = ("inside", "outside", "clamp", "sum")
#: ``none``: the norm has no weight (OLMo-1's LayerNorm, Llama 4's L2 norm).
GAINS = ("w", "1+w", "none")
#: ``rms`` q = mean(x^2); ``layer`` v = mean((x - mean(x))^2); ``gated-rms`` mean of the squares
#: of the gated input per group (Mamba2); ``l2`` x * rsqrt(mean(x^2) + eps) without a weight.
NORMS = ("rms", "layer", "gated-rms", "l2")
REDUCTION_DTYPES = ("float16", "bfloat16", "float32", "float64")

#: The settings of one norm, in display order.
FIELDS = (
    "eps",
    "placement",
    "gain",
    "gain_baked",
    "reduction_dtype",
    "weight_after_cast",
    "dim",
    "norm",
)

ProvenanceKind = Literal["file", "framework", "derived", "missing", "conflict"]
Value = float | int | str | bool | None


@dataclass(frozen=True)
class Provenance:
    """Where a value came from.

    ``file``: ``source`` is the file, ``key`` the key path inside it. ``framework``: ``source``
    names the API and its version range (a framework's documented default). ``derived``: computed
    from other keys, named in ``note``. ``missing``: no source gives it. ``conflict``: several
    keys give different values (listed in ``note``), so none is chosen.
    """

    kind: ProvenanceKind
    source: str = ""
    key: str | None = None
    note: str = ""

    def describe(self, this_file: str | None = None) -> str:
        """One line for people: ``file.yaml: defaults.eps``, ``framework default (...)``.

        A file source equal to ``this_file`` (the config being shown) is left out.
        """
        src = "" if self.source == this_file else self.source
        if self.kind == "file":
            text = f"{src}: {self.key}" if src else f"{self.key}"
        elif self.kind == "framework":
            text = f"framework default ({self.source})"
        elif self.kind == "derived":
            return f"derived from {src}: {self.note}" if src else f"derived: {self.note}"
        elif self.kind == "conflict":
            return f"conflict: {self.note}"
        else:
            text = "missing"
        return f"{text}; {self.note}" if self.note else text


def missing(note: str = "") -> Resolved:
    """A value that no source gives."""
    return Resolved(None, Provenance("missing", note=note))


@dataclass(frozen=True)
class Resolved:
    """One setting's value and provenance.

    ``stored`` names the storage type when the file holds a rounded value (GGUF eps is float32);
    ``short`` is then the shortest decimal that reads back as the same stored value (1e-05 for
    9.999999747378752e-06).
    """

    value: Value
    provenance: Provenance
    stored: str | None = None
    short: str | None = None

    @property
    def is_missing(self) -> bool:
        return self.value is None


@dataclass(frozen=True)
class NormSettings:
    """Every setting of a norm (or of the defaults), each one :class:`Resolved`."""

    eps: Resolved = field(default_factory=missing)
    placement: Resolved = field(default_factory=missing)
    gain: Resolved = field(default_factory=missing)
    gain_baked: Resolved = field(default_factory=missing)
    reduction_dtype: Resolved = field(default_factory=missing)
    weight_after_cast: Resolved = field(default_factory=missing)
    dim: Resolved = field(default_factory=missing)
    norm: Resolved = field(default_factory=missing)

    def get(self, name: str) -> Resolved:
        value: Resolved = getattr(self, name)
        return value

    def overlay(self, partial: dict[str, Resolved]) -> NormSettings:
        """These settings with the keys of ``partial`` replaced."""
        return replace(self, **partial)


@dataclass(frozen=True)
class ConfigEntry:
    """One ``layers:`` entry: a glob of layer names (:mod:`rmsnorm_eps.config.globs`, matched
    through :meth:`NormConfig.matching`) and the settings it sets itself."""

    pattern: str
    overrides: tuple[tuple[str, Resolved], ...]


@dataclass(frozen=True)
class NormConfig:
    """A model's normalization config as read from one file.

    A layer's settings are the ``defaults`` with every matching entry applied in file order
    (a later entry overrides the keys it sets, as in .gitattributes). A config without
    ``layers:`` entries has one implicit entry ``*``.
    """

    command: ClassVar[str] = "config show"  # names its reporter (rmsnorm_eps.reports)

    path: str
    kind: Literal["yaml", "hf", "gguf", "onnx", "trtllm", "executorch", "mlx"]
    model: str | None
    defaults: NormSettings
    entries: tuple[ConfigEntry, ...]
    notes: tuple[str, ...] = ()
    source: str | None = None

    @cached_property
    def _index(self) -> GlobIndex:
        return GlobIndex.build(e.pattern for e in self.entries)

    @cached_property
    def _overlays(self) -> dict[tuple[int, ...], NormSettings]:
        return {}

    def matching(self, name: str) -> tuple[ConfigEntry, ...]:
        """The entries whose pattern matches ``name``, in file order."""
        return tuple(self.entries[i] for i in self._index.matches(name))

    def settings_for(self, name: str) -> NormSettings | None:
        """The resolved settings of layer ``name``, or None when no entry matches it.

        The defaults with every matching entry applied in file order (later ones override the
        keys they set). This is the one resolution of every command (``ratio``/``compare
        --config``, ``config show``, ``config diff``).
        """
        hits = self._index.matches(name)
        if not hits:
            return None
        cached = self._overlays.get(hits)
        if cached is not None:
            return cached
        settings = self.defaults
        for i in hits:
            if self.entries[i].overrides:
                settings = settings.overlay(dict(self.entries[i].overrides))
        if len(self._overlays) < 65536:
            self._overlays[hits] = settings
        return settings

    def resolved_entries(self) -> tuple[tuple[str, NormSettings], ...]:
        """Each entry's pattern with the settings shown for it: those of its witness name (the
        shortest name its glob matches, :func:`~rmsnorm_eps.config.globs.witness`) resolved
        like any layer, so a later entry that also matches it is applied. Without a witness (a
        glob that matches nothing): the defaults with this entry's own keys."""
        out = []
        for entry in self.entries:
            name = witness(entry.pattern)
            settings = self.settings_for(name) if name is not None else None
            if settings is None:
                settings = self.defaults.overlay(dict(entry.overrides))
            out.append((entry.pattern, settings))
        return tuple(out)

    def unmatched(self, names: Iterable[str]) -> tuple[str, ...]:
        return tuple(n for n in names if not self._index.matches(n))

"""Loading a config by its content, per-layer eps for a dump, and comparing two configs."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rmsnorm_eps.config.model import FIELDS, NormConfig, NormSettings, Resolved
from rmsnorm_eps.errors import ConfigError, InputFileError

__all__ = [
    "DIFF_REL_TOL",
    "SIGNIFICANT_FIELDS",
    "ConfigDiff",
    "EpsAssignment",
    "FieldDifference",
    "diff_configs",
    "eps_for_layers",
    "load_config",
]

#: eps values a and b agree when |a - b| <= DIFF_REL_TOL * max(|a|, |b|) (absorbs float32).
DIFF_REL_TOL = 1e-6
#: A difference in one of these makes ``config diff`` exit 1; others are reported as notes.
SIGNIFICANT_FIELDS = ("eps", "placement", "gain", "norm")


def load_config(path: str | os.PathLike[str]) -> NormConfig:
    """Read a YAML, JSON (HF config.json / Meta params.json) or GGUF config.

    GGUF is recognised by its magic bytes; JSON by a ``.json`` extension or a leading ``{``;
    anything else is read as our YAML schema.
    """
    from rmsnorm_eps.sources.sniff import Kind, check_regular_file, sniff

    p = Path(path)
    size = check_regular_file(p)
    if size == 0:
        raise InputFileError(p, "empty file")
    kind = sniff(p)
    if kind is Kind.GGUF or p.suffix.lower() == ".gguf":
        from rmsnorm_eps.config.gguf_reader import read_gguf_config

        return read_gguf_config(p)
    if kind is Kind.JSON or p.suffix.lower() == ".json":
        from rmsnorm_eps.config.hf import read_hf_config

        return read_hf_config(p)
    from rmsnorm_eps.config.yaml_reader import read_yaml_config

    return read_yaml_config(p)


@dataclass(frozen=True)
class EpsAssignment:
    """eps per dump layer and where each came from: ``file: key (layer matches PATTERNS)`` for a
    config value, ``--eps (explicit fallback)`` for the user's fallback."""

    eps: dict[str, float]
    provenance: dict[str, str]


def _listed(names: Iterable[str], limit: int = 20) -> str:
    items = list(names)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def eps_for_layers(
    config: NormConfig,
    names: Iterable[str],
    fallback: float | None = None,
    *,
    remedy: str | None = None,
) -> EpsAssignment:
    """eps for each layer name from the config's globs.

    A name that matches no entry, or whose eps is missing (or in conflict), is an error unless
    ``fallback`` (the user's explicit --eps) is given; then it gets the fallback. ``remedy``
    ends the error messages (default: the ``--eps`` fallback of ``ratio``).
    """
    names = list(names)
    unmatched = config.unmatched(names)
    if unmatched and fallback is None:
        raise ConfigError(
            f"{config.path}: {len(unmatched)} dump layer(s) match no layer pattern of the config "
            f"({_listed(e.pattern for e in config.entries)}): {_listed(unmatched)}; "
            + (remedy or "fix the config or give --eps as an explicit fallback")
        )
    eps: dict[str, float] = {}
    prov: dict[str, str] = {}
    no_eps: list[tuple[str, Resolved]] = []
    for name in names:
        settings = config.settings_for(name)
        value = settings.eps if settings is not None else None
        if value is None or value.value is None:
            if value is not None:
                no_eps.append((name, value))
            if fallback is not None:
                eps[name] = fallback
                prov[name] = "--eps (explicit fallback)"
            continue
        assert isinstance(value.value, float)
        eps[name] = value.value
        patterns = ", ".join(e.pattern for e in config.matching(name))
        prov[name] = f"{value.provenance.describe()} (layer matches {patterns})"
    if no_eps and fallback is None:
        why = no_eps[0][1].provenance.describe()
        raise ConfigError(
            f"{config.path}: eps is {why} for {len(no_eps)} layer(s): "
            f"{_listed(n for n, _ in no_eps)}; " + (remedy or "give --eps explicitly")
        )
    return EpsAssignment(eps=eps, provenance=prov)


@dataclass(frozen=True)
class FieldDifference:
    """One setting that differs between A and B, for the listed norm patterns."""

    field: str
    a: Resolved
    b: Resolved
    patterns: tuple[str, ...]
    significant: bool


@dataclass(frozen=True)
class ConfigDiff:
    """The result of comparing config A with config B norm by norm."""

    command: ClassVar[str] = "config diff"  # names its reporter (rmsnorm_eps.reports)

    a: NormConfig
    b: NormConfig
    patterns: tuple[str, ...]
    differences: tuple[FieldDifference, ...]
    rel_tol: float

    @property
    def significant(self) -> tuple[FieldDifference, ...]:
        return tuple(d for d in self.differences if d.significant)

    @property
    def equivalent(self) -> bool:
        return not self.significant


def eps_equal(a: float, b: float, rel_tol: float = DIFF_REL_TOL) -> bool:
    """|a - b| <= rel_tol * max(|a|, |b|): 1e-5 equals its float32 9.999999747378752e-06."""
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)


def _differs(field: str, a: Resolved, b: Resolved, rel_tol: float) -> bool | None:
    """True/False when both are known; None when one or both are missing."""
    if a.value is None or b.value is None:
        return None
    if field == "eps":
        assert isinstance(a.value, float) and isinstance(b.value, float)
        return not eps_equal(a.value, b.value, rel_tol)
    return a.value != b.value


def _settings_or_defaults(config: NormConfig, pattern: str) -> NormSettings:
    settings = config.settings_for(pattern)
    return settings if settings is not None else config.defaults


def diff_configs(a: NormConfig, b: NormConfig, rel_tol: float = DIFF_REL_TOL) -> ConfigDiff:
    """Compare A and B for every layer pattern either of them names.

    For each pattern, each side's settings are those a layer of that name would get (its
    defaults when none of its entries matches). eps agree within ``rel_tol`` (relative); the
    other settings must be equal. A significant setting (eps, placement, gain, norm) that is
    missing on either side is a difference: equivalence cannot be shown.
    """
    patterns: list[str] = []
    for entry in (*a.entries, *b.entries):
        if entry.pattern not in patterns:
            patterns.append(entry.pattern)
    grouped: dict[tuple[str, Resolved, Resolved], list[str]] = {}
    for pattern in patterns:
        sa, sb = _settings_or_defaults(a, pattern), _settings_or_defaults(b, pattern)
        for field in FIELDS:
            ra, rb = sa.get(field), sb.get(field)
            differs = _differs(field, ra, rb, rel_tol)
            significant = field in SIGNIFICANT_FIELDS
            if differs is False or (
                differs is None and ra.value is None and rb.value is None and not significant
            ):
                continue
            grouped.setdefault((field, ra, rb), []).append(pattern)
    diffs = tuple(
        FieldDifference(field, ra, rb, tuple(pats), field in SIGNIFICANT_FIELDS)
        for (field, ra, rb), pats in grouped.items()
    )
    diffs = tuple(sorted(diffs, key=lambda d: (not d.significant, FIELDS.index(d.field))))
    return ConfigDiff(a=a, b=b, patterns=tuple(patterns), differences=diffs, rel_tol=rel_tol)

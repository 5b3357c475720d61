"""Loading a config by its content, per-layer eps for a dump, and comparing two configs."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rmsnorm_eps.config.fields import shorten
from rmsnorm_eps.config.globs import witness
from rmsnorm_eps.config.model import FIELDS, NormConfig, NormSettings, Provenance, Resolved, Value
from rmsnorm_eps.errors import ConfigError, InputFileError

__all__ = [
    "DIFF_REL_TOL",
    "SIGNIFICANT_FIELDS",
    "ConfigDiff",
    "EpsAssignment",
    "FieldDifference",
    "diff_by_names",
    "diff_configs",
    "eps_for_layers",
    "load_config",
    "model_dir_config",
    "unused_patterns",
]

#: eps values a and b agree when |a - b| <= DIFF_REL_TOL * max(|a|, |b|) (absorbs float32).
DIFF_REL_TOL = 1e-6
#: A difference in one of these makes ``config diff`` exit 1; others are reported as notes.
SIGNIFICANT_FIELDS = ("eps", "placement", "gain", "norm")


def model_dir_config(directory: Path) -> Path:
    """The config file of a model directory: ``config.json`` (as ``capture --model DIR``
    reads), else its single ``.gguf`` file. Several GGUF files and no config.json: an error
    naming them (pick one)."""
    config = directory / "config.json"
    if config.is_file():
        return config
    try:
        ggufs = sorted(x for x in directory.iterdir() if x.suffix.lower() == ".gguf")
    except OSError as exc:
        raise InputFileError(directory, f"cannot list: {exc.strerror or exc}") from None
    if len(ggufs) == 1:
        return ggufs[0]
    if not ggufs:
        raise InputFileError(
            directory, "is a directory without config.json or a .gguf file (not a model directory)"
        )
    raise InputFileError(
        directory,
        f"no config.json and {len(ggufs)} GGUF files ({_listed(x.name for x in ggufs)}): "
        "give one of them",
    )


def load_config(path: str | os.PathLike[str]) -> NormConfig:
    """Read a YAML, JSON (HF config.json / Meta params.json), GGUF or ONNX config.

    A directory is a model directory: its ``config.json``, else its single GGUF file.

    GGUF is recognised by its magic bytes; ONNX (no magic bytes) by a ``.onnx`` extension;
    JSON by a ``.json`` extension or a leading ``{``; anything else is read as our YAML schema.
    """
    from rmsnorm_eps.sources.sniff import Kind, check_regular_file, sniff

    p = Path(path)
    if p.is_dir():
        p = model_dir_config(p)
    size = check_regular_file(p)
    if size == 0:
        raise InputFileError(p, "empty file")
    kind = sniff(p)
    if kind is Kind.GGUF or p.suffix.lower() == ".gguf":
        from rmsnorm_eps.config.gguf_reader import read_gguf_config

        return read_gguf_config(p)
    if p.suffix.lower() == ".onnx":
        from rmsnorm_eps.config.onnx_graph import read_onnx_config

        return read_onnx_config(p)
    if kind is Kind.JSON or p.suffix.lower() == ".json":
        # HF config.json, or a TensorRT-LLM / ExecuTorch / MLX config (by its keys)
        from rmsnorm_eps.config.runtime_configs import read_json_config

        return read_json_config(p)
    from rmsnorm_eps.config.yaml_reader import read_yaml_config

    return read_yaml_config(p)


@dataclass(frozen=True)
class EpsAssignment:
    """eps per dump layer and where each came from: ``file: key (layer matches PATTERNS)`` for a
    config value, ``--fallback-eps`` for the user's fallback."""

    eps: dict[str, float]
    provenance: dict[str, str]


def _listed(names: Iterable[str], limit: int = 20) -> str:
    items = list(names)
    shown = ", ".join(shorten(n, 80) for n in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def eps_for_layers(
    config: NormConfig,
    names: Iterable[str],
    fallback: float | None = None,
    *,
    remedy: str | None = None,
    allow_unmatched: bool = False,
    skipped: Iterable[str] = (),
) -> EpsAssignment:
    """eps for each layer name from the config's globs.

    A name that matches no entry, or whose eps is missing (or in conflict), is an error unless
    ``fallback`` (ratio's ``--fallback-eps``) is given; then it gets the fallback. ``remedy``
    ends the error messages (default: ``--fallback-eps`` of ``ratio``). A pattern the user
    wrote (a YAML ``layers:`` entry) that matches none of ``names`` is an error too, unless
    ``allow_unmatched``: a typo (``*.input_layernrom``) would otherwise leave every layer on
    the defaults while the user believes the override applied (:func:`unused_patterns`).
    ``skipped``: the names of the dump's layers that could not be read (``--skip-unreadable``):
    they need no eps, but a pattern that matches one of them is used, not a typo.
    """
    names = list(names)
    unmatched = config.unmatched(names)
    if unmatched and fallback is None:
        raise ConfigError(
            f"{config.path}: {len(unmatched)} dump layer(s) match no layer pattern of the config "
            f"({_listed(e.pattern for e in config.entries)}): {_listed(unmatched)}; "
            + (remedy or "fix the config or give --fallback-eps")
        )
    if not allow_unmatched:
        unused = unused_patterns(config, [*names, *skipped])
        if unused:
            raise ConfigError(
                f"{config.path}: {len(unused)} layer pattern(s) match no layer of the dump: "
                f"{_listed(unused)}; fix the pattern(s) or give --allow-unmatched"
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
                prov[name] = "--fallback-eps"
            continue
        assert isinstance(value.value, float)
        eps[name] = value.value
        patterns = ", ".join(e.pattern for e in config.matching(name))
        prov[name] = f"{value.provenance.describe()} (layer matches {patterns})"
    if no_eps and fallback is None:
        why = no_eps[0][1].provenance.describe()
        raise ConfigError(
            f"{config.path}: eps is {why} for {len(no_eps)} layer(s): "
            f"{_listed(n for n, _ in no_eps)}; " + (remedy or "give --fallback-eps")
        )
    return EpsAssignment(eps=eps, provenance=prov)


def unused_patterns(config: NormConfig, names: Iterable[str]) -> tuple[str, ...]:
    """The patterns of a YAML config's ``layers:`` entries that match none of ``names``, in
    file order. Only patterns a person wrote count: the entries a reader derives from an HF
    config.json or GGUF file name every norm the family may have, and a dump may hold a few."""
    if config.kind != "yaml":
        return ()
    hit: set[str] = set()
    for name in names:
        hit.update(e.pattern for e in config.matching(name))
    return tuple(dict.fromkeys(e.pattern for e in config.entries if e.pattern not in hit))


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


def _settings_or_defaults(config: NormConfig, name: str) -> NormSettings:
    settings = config.settings_for(name)
    return settings if settings is not None else config.defaults


def _canonical(config: NormConfig, field: str) -> tuple[Value, tuple[tuple[str, Value], ...]]:
    """(base value, ((pattern, value), ...)): field ``field`` of ``config`` as a function of
    the layer name, in a normal form.

    The value for a name is that of the last entry setting the field whose glob matches the
    name, else the base (the defaults). Simplifications that keep the function: an entry
    followed by a later one with the same pattern is dropped; an entry ``*`` (matches every
    name) replaces the base and drops everything before it; a first entry whose value equals
    the base is dropped (repeatedly).
    """
    base = config.defaults.get(field).value
    rows: list[tuple[str, Value]] = [
        (e.pattern, r.value) for e in config.entries for name, r in e.overrides if name == field
    ]
    last = {pattern: i for i, (pattern, _) in enumerate(rows)}
    rows = [row for i, row in enumerate(rows) if last[row[0]] == i]
    stars = [i for i, (pattern, _) in enumerate(rows) if pattern and set(pattern) == {"*"}]
    if stars:
        base = rows[stars[-1]][1]
        rows = rows[stars[-1] + 1 :]
    while rows and _same(field, rows[0][1], base):
        rows.pop(0)
    return base, tuple(rows)


def _same(field: str, a: Value, b: Value) -> bool:
    if field == "eps" and isinstance(a, float) and isinstance(b, float):
        return eps_equal(a, b)
    return a == b and type(a) is type(b)


def _canonical_equal(a: NormConfig, b: NormConfig, field: str) -> bool:
    base_a, rows_a = _canonical(a, field)
    base_b, rows_b = _canonical(b, field)
    return (
        _same(field, base_a, base_b)
        and len(rows_a) == len(rows_b)
        and all(
            pa == pb and _same(field, va, vb)
            for (pa, va), (pb, vb) in zip(rows_a, rows_b, strict=True)
        )
    )


#: Pairs of patterns tried for a name that both match (``x*`` and ``*y`` -> ``xy``).
_MAX_PAIR_PATTERNS = 200


def _distinguishing_name(
    a: NormConfig, b: NormConfig, field: str, patterns: list[str], rel_tol: float
) -> tuple[str, Resolved, Resolved] | None:
    """A layer name on which A and B give ``field`` different values, found by joining the
    witnesses of two patterns (a name that both may match); None when none of those shows one
    (or there are too many patterns to try pairs)."""
    unique = list(dict.fromkeys(patterns))
    if len(unique) > _MAX_PAIR_PATTERNS:
        return None
    witnesses = [w for w in (witness(p) for p in unique) if w is not None]
    for first in witnesses:
        for second in witnesses:
            name = first + second
            ra = _settings_or_defaults(a, name).get(field)
            rb = _settings_or_defaults(b, name).get(field)
            if _differs(field, ra, rb, rel_tol):
                return name, ra, rb
    return None


Grouped = dict[tuple[str, Resolved, Resolved], list[str]]


def _probe_names(patterns: list[str], names: Iterable[str]) -> list[tuple[str, str]]:
    """(name, label shown) pairs: each pattern's witness (labelled by the pattern), then
    ``names`` (labelled by themselves), each name once."""
    probes: dict[str, str] = {}
    for pattern in patterns:
        name = witness(pattern)
        if name is not None:
            probes.setdefault(name, pattern)
    for name in names:
        probes.setdefault(name, name)
    return list(probes.items())


def _diff_names(
    a: NormConfig,
    b: NormConfig,
    probes: list[tuple[str, str]],
    rel_tol: float,
    grouped: Grouped,
    one_sided: bool = False,
) -> set[str]:
    """Resolve every probe name on both sides; group the differing (field, A, B) by label.
    Returns the fields shown. A setting outside SIGNIFICANT_FIELDS missing on both sides is not
    a difference; with ``one_sided`` neither is one missing on one side only."""
    shown: set[str] = set()
    for name, label in probes:
        sa, sb = _settings_or_defaults(a, name), _settings_or_defaults(b, name)
        for field in FIELDS:
            ra, rb = sa.get(field), sb.get(field)
            differs = _differs(field, ra, rb, rel_tol)
            if differs is False or (
                differs is None
                and field not in SIGNIFICANT_FIELDS
                and (one_sided or (ra.value is None and rb.value is None))
            ):
                continue
            shown.add(field)
            grouped.setdefault((field, ra, rb), []).append(label)
    return shown


def _diff_normal_forms(
    a: NormConfig, b: NormConfig, field: str, rel_tol: float, grouped: Grouped
) -> None:
    """``field``'s normal forms differ but no probe name showed it: a joined name that
    differs, or a "not proven equal" conflict listing the patterns involved."""
    rows_a = _canonical(a, field)[1]
    rows_b = _canonical(b, field)[1]
    example = _distinguishing_name(a, b, field, [p for p, _ in (*rows_a, *rows_b)], rel_tol)
    if example is not None:
        name, ra, rb = example
        grouped.setdefault((field, ra, rb), []).append(name)
        return
    why = (
        f"not proven equal for every layer name: A sets {field} by {len(rows_a)} "
        f"pattern(s), B by {len(rows_b)}, in different ways"
    )
    ra = Resolved(None, Provenance("conflict", a.path, note=why))
    rb = Resolved(None, Provenance("conflict", b.path, note=why))
    grouped[(field, ra, rb)] = list(dict.fromkeys(p for p, _ in (*rows_a, *rows_b)))[:20]


def _result(
    a: NormConfig, b: NormConfig, patterns: list[str], grouped: Grouped, rel_tol: float
) -> ConfigDiff:
    """The ConfigDiff of ``grouped``: significant differences first, then in FIELDS order."""
    diffs = [
        FieldDifference(field, ra, rb, tuple(pats), field in SIGNIFICANT_FIELDS)
        for (field, ra, rb), pats in grouped.items()
    ]
    diffs.sort(key=lambda d: (not d.significant, FIELDS.index(d.field)))
    return ConfigDiff(a=a, b=b, patterns=tuple(patterns), differences=tuple(diffs), rel_tol=rel_tol)


def diff_configs(
    a: NormConfig,
    b: NormConfig,
    rel_tol: float = DIFF_REL_TOL,
    names: Iterable[str] = (),
) -> ConfigDiff:
    """Compare the settings A and B give every layer name, resolved as ``ratio --config`` does.

    Names compared: the witness of every pattern of A and of B (the shortest name the glob
    matches: ``model.layers.[0-9].input_layernorm`` -> ``model.layers.0.input_layernorm``) and
    ``names`` (e.g. a dump's layers). Each side resolves each name with
    :meth:`NormConfig.settings_for` (its defaults when no entry matches). eps agree within
    ``rel_tol`` (relative); other settings must be equal. A significant setting (eps,
    placement, gain, norm) missing on either side is a difference: equivalence cannot be shown.

    Names spelled by the patterns cannot show every difference of two glob sets (``x*`` then
    ``*y`` differ from ``*y`` then ``x*`` only on ``xy``), so a field no compared name shows
    different must also have the same normal form (:func:`_canonical`) on both sides, else it
    is a difference (:func:`_diff_normal_forms`). Equivalent therefore means: equal for every
    possible layer name, not just the ones tried.
    """
    patterns = list(dict.fromkeys(e.pattern for e in (*a.entries, *b.entries)))
    grouped: Grouped = {}
    shown = _diff_names(a, b, _probe_names(patterns, names), rel_tol, grouped)
    for field in FIELDS:
        if field not in shown and not _canonical_equal(a, b, field):
            _diff_normal_forms(a, b, field, rel_tol, grouped)
    return _result(a, b, patterns, grouped, rel_tol)


def diff_by_names(a: NormConfig, b: NormConfig) -> ConfigDiff:
    """Compare A and B on the norms of the ONNX side(s) only: each graph norm's module name
    is resolved on both sides (a config.json's ``*`` covers it) and every setting compared as
    :func:`diff_configs` does (eps within DIFF_REL_TOL: 1e-5 stored as float32 agrees, as
    float16 1.0013580322265625e-05 does not). A setting the graph cannot show (gain_baked,
    weight_after_cast) is not compared when only one side knows it. Returns a
    :class:`ConfigDiff` whose ``patterns`` are the compared names. An ONNX side without any
    norm, or a YAML pattern that matches none of the graph's norms, is a ConfigError: the
    comparison would otherwise pass on nothing compared.
    """
    for side in (a, b):
        if side.kind == "onnx" and not side.entries:
            raise ConfigError(
                f"{side.path}: no normalization found in the ONNX graph: nothing to compare"
            )
    onnx = [e.pattern for side in (a, b) if side.kind == "onnx" for e in side.entries]
    patterns = list(dict.fromkeys(onnx))
    grouped: Grouped = {}
    probes = [(unescape_glob(pattern), pattern) for pattern in patterns]
    for side in (a, b):
        unused = unused_patterns(side, (name for name, _ in probes))
        if unused:  # a typo'd override would otherwise pass (as ratio --config refuses it)
            raise ConfigError(
                f"{side.path}: {len(unused)} layer pattern(s) match no norm of the ONNX "
                f"graph: {_listed(unused)}; fix the pattern(s)"
            )
    _diff_names(a, b, probes, DIFF_REL_TOL, grouped, one_sided=True)
    return _result(a, b, patterns, grouped, DIFF_REL_TOL)


def unescape_glob(pattern: str) -> str:
    """The name :func:`rmsnorm_eps.config.onnx_graph.escape_glob` made ``pattern`` from: an
    ONNX config's patterns are module names with ``*``, ``?`` and ``[`` bracketed."""
    for c in "*?[":
        pattern = pattern.replace(f"[{c}]", c)
    return pattern

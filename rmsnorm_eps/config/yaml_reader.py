"""Reader for our YAML schema (docs/configs.md).

::

    schema_version: 1
    model: Llama-3-8B
    source: https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
    defaults: {eps: 1e-5, placement: inside, gain: w, dim: 4096, norm: rms}
    layers:
      "*.input_layernorm": {}
      "*.self_attn.q_norm": {eps: 1e-6, dim: 128}

The text is parsed once into a node tree with ``yaml.compose`` (no construction; libyaml's
CSafeLoader when installed), which is checked first: duplicate keys (which safe_load would
resolve silently to the last one) and merge keys ``<<`` (which would copy settings from
elsewhere without saying so) are refused. Values are then built by PyYAML's SafeConstructor
only (no tag can run code). Unknown keys are errors. Files over :data:`MAX_YAML_BYTES` are
refused before parsing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rmsnorm_eps.config.fields import parse_setting, shorten
from rmsnorm_eps.config.json_file import read_capped_text
from rmsnorm_eps.config.model import (
    FIELDS,
    ConfigEntry,
    NormConfig,
    NormSettings,
    Provenance,
    Resolved,
)
from rmsnorm_eps.errors import InputFileError, brief

__all__ = [
    "MAX_YAML_BYTES",
    "MAX_YAML_NODES",
    "MAX_YAML_PATTERNS",
    "TOP_KEYS",
    "YAML_SCHEMA_VERSION",
    "read_yaml_config",
]

#: Largest YAML config read (a generated config for a 1000-layer model is under 1 MiB); the
#: PyYAML node tree costs about 100 bytes of memory per byte of YAML.
MAX_YAML_BYTES = 2 << 20
#: Largest number of layer patterns (``layers:`` entries): as many as a dump may hold layers
#: (:data:`rmsnorm_eps.sources.MAX_LAYERS`); real configs have a handful.
MAX_YAML_PATTERNS = 4096
#: Largest number of YAML nodes (scalars, mappings, sequences, aliases) composed. A node tree
#: costs about 1 KiB per node in PyYAML; 60,000 nodes hold :data:`MAX_YAML_PATTERNS` entries
#: that each give all six settings (14 nodes). Counted on the event stream first, in constant
#: memory.
MAX_YAML_NODES = 60_000
_MERGE_TAG = "tag:yaml.org,2002:merge"

YAML_SCHEMA_VERSION = 1
TOP_KEYS = ("schema_version", "model", "source", "defaults", "layers")


def _check_duplicates(
    node: Any, path: str, where: str = "", visited: set[int] | None = None
) -> None:
    """Refuse duplicate keys in every mapping. Each node is visited once: an alias is the same
    node object as its anchor, so an alias bomb ("billion laughs") costs its size in the file,
    not the size of its expansion."""
    import yaml

    visited = set() if visited is None else visited
    if id(node) in visited:
        return
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = str(key_node.value)
                sub = f"{where}.{shorten(key)}" if where else shorten(key)
                line = key_node.start_mark.line + 1
                if key_node.tag == _MERGE_TAG:
                    raise InputFileError(
                        path,
                        f"YAML merge key << (line {line}) is not allowed: write the settings out",
                        key=sub,
                    )
                if key in seen:
                    raise InputFileError(path, f"duplicate key (line {line})", key=sub)
                seen.add(key)
            else:
                sub = f"{where}.?" if where else "?"
            _check_duplicates(value_node, path, sub, visited)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicates(item, path, f"{where}[{i}]", visited)


def _count_nodes(yaml: Any, text: str, loader_cls: Any, path: Path) -> None:
    """Refuse a document of more than MAX_YAML_NODES nodes before building any of them."""
    kinds = (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent, yaml.AliasEvent)
    count = 0
    for event in yaml.parse(text, Loader=loader_cls):
        if isinstance(event, kinds):
            count += 1
            if count > MAX_YAML_NODES:
                line = event.start_mark.line + 1 if event.start_mark is not None else 0
                raise InputFileError(
                    path,
                    f"YAML config has over {MAX_YAML_NODES} values (at line {line}): "
                    "refused (size cap)",
                )


def _load(path: Path) -> Any:
    import yaml

    text = read_capped_text(path, MAX_YAML_BYTES, "YAML")
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:  # counted, composed, checked, then built from the same nodes (module docstring)
        _count_nodes(yaml, text, loader_cls, path)
        node = yaml.compose(text, Loader=loader_cls)
        if node is None:
            return None
        _check_duplicates(node, str(path))
        constructor = yaml.constructor.SafeConstructor()
        return constructor.construct_document(node)
    except RecursionError:
        raise InputFileError(path, "invalid YAML: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise InputFileError(path, f"invalid YAML: {' '.join(str(exc).split())}") from None
    except yaml.YAMLError as exc:
        if "nesting depth" in str(exc):  # libyaml's own depth limit
            raise InputFileError(path, "invalid YAML: nested too deeply") from None
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputFileError(
            path, f"invalid YAML{line}: {' '.join(str(problem).split())}"
        ) from None


def _settings(raw: Any, path: str, where: str) -> dict[str, Resolved]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InputFileError(path, f"expected a mapping of settings, got {brief(raw)}", key=where)
    out: dict[str, Resolved] = {}
    for name, value in raw.items():
        key = f"{where}.{name}"
        if name not in FIELDS:
            raise InputFileError(
                path, f"unknown key {brief(name)} (allowed: {', '.join(FIELDS)})", key=key
            )
        out[name] = Resolved(parse_setting(name, value, path, key), Provenance("file", path, key))
    return out


def read_yaml_config(path: Path) -> NormConfig:
    """Read and validate one YAML config; every value's provenance is ``FILE: key.path``."""
    p = str(path)
    data = _load(path)
    if not isinstance(data, dict):
        raise InputFileError(
            path, "expected a mapping at the top level (schema_version, model, defaults, layers)"
        )
    for key in data:
        if key not in TOP_KEYS:
            raise InputFileError(
                path, f"unknown key {brief(key)} (allowed: {', '.join(TOP_KEYS)})", key=brief(key)
            )
    version = data.get("schema_version")
    if version != YAML_SCHEMA_VERSION or isinstance(version, bool):
        raise InputFileError(
            path,
            f"schema_version must be {YAML_SCHEMA_VERSION}, got {brief(version)}",
            key="schema_version",
        )
    for key in ("model", "source"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise InputFileError(path, f"expected a string, got {brief(data[key])}", key=key)
    defaults = NormSettings().overlay(_settings(data.get("defaults"), p, "defaults"))
    raw_layers = data.get("layers")
    entries: list[ConfigEntry] = []
    if raw_layers is not None:
        if not isinstance(raw_layers, dict):
            raise InputFileError(path, "expected a mapping glob -> settings", key="layers")
        if len(raw_layers) > MAX_YAML_PATTERNS:
            raise InputFileError(
                path,
                f"{len(raw_layers)} layer patterns, more than the {MAX_YAML_PATTERNS} a config "
                "may hold: refused (size cap)",
                key="layers",
            )
        for pattern, raw in raw_layers.items():
            if not isinstance(pattern, str) or not pattern:
                raise InputFileError(
                    path,
                    f"layer pattern must be a non-empty string, got {brief(pattern)}",
                    key="layers",
                )
            where = f'layers["{shorten(pattern)}"]'
            entries.append(ConfigEntry(pattern, tuple(_settings(raw, p, where).items())))
    notes: tuple[str, ...] = ()
    if not entries:
        entries.append(ConfigEntry("*", ()))
        notes = ("no layers: entries; the defaults apply to every layer (implicit '*')",)
    return NormConfig(
        path=p,
        kind="yaml",
        model=data.get("model"),
        defaults=defaults,
        entries=tuple(entries),
        notes=notes,
        source=data.get("source"),
    )

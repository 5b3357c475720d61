"""Writing a :class:`NormConfig` as our YAML schema (the same document shape ``capture
--config-out`` writes): defaults, then one ``layers:`` entry per pattern with the keys it sets.

Values that are missing or in conflict are left out (they read back as missing); every other
value reads back unchanged, so ``read_yaml_config(write(c))`` resolves every layer name as ``c``
does (tests/test_config_roundtrip.py checks this for every model family of the HF table).
"""

from __future__ import annotations

from typing import Any

from rmsnorm_eps.config.model import FIELDS, NormConfig, Resolved
from rmsnorm_eps.config.yaml_reader import YAML_SCHEMA_VERSION

__all__ = ["config_yaml_document", "render_config_yaml"]


def _known(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, r in items:
        assert isinstance(r, Resolved)
        if r.value is not None:
            out[name] = r.value
    return out


def config_yaml_document(config: NormConfig) -> dict[str, Any]:
    """The YAML document (plain dict, schema_version 1) of ``config``."""
    doc: dict[str, Any] = {"schema_version": YAML_SCHEMA_VERSION}
    if config.model is not None:
        doc["model"] = config.model
    doc["source"] = config.source if config.source is not None else config.path
    doc["defaults"] = _known((name, config.defaults.get(name)) for name in FIELDS)
    doc["layers"] = {entry.pattern: _known(entry.overrides) for entry in config.entries}
    return doc


def render_config_yaml(config: NormConfig) -> str:
    """``config`` as YAML text (``yaml.safe_dump``, key order kept)."""
    import yaml

    return yaml.safe_dump(config_yaml_document(config), sort_keys=False, width=100)

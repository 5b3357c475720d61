"""Model normalization configs: our YAML, Hugging Face config.json, GGUF metadata, framework
defaults; every resolved value with its provenance. No heavy imports here."""

from __future__ import annotations

from rmsnorm_eps.config.model import (
    FIELDS,
    ConfigEntry,
    NormConfig,
    NormSettings,
    Provenance,
    Resolved,
)
from rmsnorm_eps.config.resolve import (
    DIFF_REL_TOL,
    ConfigDiff,
    EpsAssignment,
    diff_configs,
    eps_for_layers,
    load_config,
)

__all__ = [
    "DIFF_REL_TOL",
    "FIELDS",
    "ConfigDiff",
    "ConfigEntry",
    "EpsAssignment",
    "NormConfig",
    "NormSettings",
    "Provenance",
    "Resolved",
    "diff_configs",
    "eps_for_layers",
    "load_config",
]

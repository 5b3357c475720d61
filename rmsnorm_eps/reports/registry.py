"""Which command module reports a result: a name -> module map, imported only when used.

Every result type names its command in a class attribute ``command`` (``RatioReport.command
== "ratio"``); :func:`command_of` reads it and :data:`COMMANDS` maps the name to the module
that renders it. A command module (``rmsnorm_eps/reports/commands/<name>.py``) defines:

``FORMATS``
    the ``--format`` names it supports (a frozenset);
``document(result, gate) -> dict``
    the canonical, versioned JSON document (when ``"json"`` is in ``FORMATS``);
``text(result, options) -> str``
    the text report (when ``"text"`` is in ``FORMATS``);
``checks(result, gate) -> CheckReport``
    the format-neutral check report the markdown, github, junit and sarif formats render;
``render_<format>(result, options) -> str`` (optional)
    its own rendering of one format, instead of the generic one (``bound``'s ratio table in
    markdown).

The map holds strings, so nothing is imported until a result is rendered (the CLI starts
fast); the modules import only the format helpers, never each other's registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from rmsnorm_eps.reports.options import UnsupportedResult

__all__ = ["ALL_FORMATS", "COMMANDS", "command_module", "command_of", "supported_formats"]

#: The ``--format`` names, in the order the help lists them.
ALL_FORMATS = ("text", "json", "markdown", "github", "junit", "sarif")

_PKG = "rmsnorm_eps.reports.commands"

#: Command name (a result's ``command``) -> the module that reports it.
COMMANDS: Mapping[str, str] = {
    "ratio": f"{_PKG}.ratio",
    "merge": f"{_PKG}.merge",
    "bound": f"{_PKG}.bound",
    "compare": f"{_PKG}.compare",
    "precision": f"{_PKG}.precision",
    "parity": f"{_PKG}.parity",
    "probe": f"{_PKG}.probe",
    "config show": f"{_PKG}.config_show",
    "config diff": f"{_PKG}.config_diff",
    "defaults": f"{_PKG}.defaults",
    "capture": f"{_PKG}.capture",
    "sensitivity": f"{_PKG}.sensitivity",
}


def command_of(result: object) -> str:
    """The command that reports ``result``: its type's ``command`` attribute.

    A tuple of results (``bound --ratios``) is reported by its items' command. A ratio report
    of shards (``merge``) is the one case where the instance decides: ``RatioReport`` is the
    result of both ``ratio`` and ``merge``, and a non-empty ``shards`` makes it a merge.
    """
    kind = type(result[0]) if isinstance(result, tuple) and result else type(result)
    name = getattr(kind, "command", None)
    if not isinstance(name, str) or name not in COMMANDS:
        raise UnsupportedResult(f"no reporter for {type(result).__name__}")
    if name == "ratio" and bool(getattr(result, "shards", None)):
        return "merge"
    return name


def command_module(name: str) -> ModuleType:
    """The command's reporter module (imported on first use)."""
    try:
        target = COMMANDS[name]
    except KeyError:
        raise KeyError(f"unknown command {name!r}; known: {', '.join(COMMANDS)}") from None
    return importlib.import_module(target)


def supported_formats(command: str) -> frozenset[str]:
    """The ``--format`` names ``command`` supports (for the CLI to check at parse time)."""
    formats: Any = command_module(command).FORMATS
    return frozenset(formats)

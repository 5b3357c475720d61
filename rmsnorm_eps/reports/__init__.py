"""Reporters: one module per command, one module per output format.

``render(result, fmt)`` finds the result's command (its type's ``command`` attribute), imports
that command's module (``reports/commands/<command>.py``, see :mod:`.registry`) and renders:

* ``text``: the command's ``text(result, options)``;
* ``json``: the command's ``document(result, gate)``, serialized by ``formats/json.py``;
* ``markdown``, ``github``, ``junit``, ``sarif``: the command's ``checks(result, gate)``, a
  format-neutral :class:`~rmsnorm_eps.reports.checks.CheckReport`, rendered by
  ``formats/<format>.py``, which know nothing of commands.

Everything is imported on first use (the CLI must start fast). ``FORMATS`` maps the
``--format`` names to their format modules.
"""

from __future__ import annotations

import importlib

from rmsnorm_eps.reports.options import (
    HISTOGRAM_AUTO_LAYERS,
    HISTOGRAM_CHOICES,
    RenderOptions,
    UnsupportedResult,
    color_wanted,
)
from rmsnorm_eps.reports.registry import ALL_FORMATS, supported_formats

__all__ = [
    "FORMATS",
    "HISTOGRAM_AUTO_LAYERS",
    "HISTOGRAM_CHOICES",
    "RenderOptions",
    "UnsupportedResult",
    "color_wanted",
    "render",
    "supported_formats",
]

#: ``--format`` name -> the module of that format.
FORMATS: dict[str, str] = {name: f"rmsnorm_eps.reports.formats.{name}" for name in ALL_FORMATS}

#: The formats that render a :class:`~rmsnorm_eps.reports.checks.CheckReport`.
CHECK_FORMATS = ("markdown", "github", "junit", "sarif")


def render(result: object, fmt: str, options: RenderOptions | None = None) -> str:
    """Render ``result`` in format ``fmt`` (a key of :data:`FORMATS`).

    Raises :class:`UnsupportedResult` when the result's command does not support ``fmt``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    options = options or RenderOptions()
    from rmsnorm_eps.reports.checks import CheckReport
    from rmsnorm_eps.reports.registry import command_module, command_of

    if isinstance(result, CheckReport):  # already format-neutral
        if fmt not in CHECK_FORMATS:
            raise UnsupportedResult(f"{fmt} format cannot render a check report")
        text: str = importlib.import_module(FORMATS[fmt]).render_checks(result)
        return text
    name = command_of(result)
    module = command_module(name)
    if fmt not in module.FORMATS:
        raise UnsupportedResult(f"{fmt} format is not available for {name}")
    own = getattr(module, f"render_{fmt}", None)
    if own is not None:
        text = own(result, options)
    elif fmt == "text":
        text = module.text(result, options)
    elif fmt == "json":
        from rmsnorm_eps.reports.formats.json import render_document

        text = render_document(module.document(result, options.gate))
    else:
        text = importlib.import_module(FORMATS[fmt]).render_checks(
            module.checks(result, options.gate)
        )
    return text

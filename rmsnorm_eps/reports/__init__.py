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
from collections.abc import Iterator

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
    "render_chunks",
    "supported_formats",
]

#: ``--format`` name -> the module of that format.
FORMATS: dict[str, str] = {name: f"rmsnorm_eps.reports.formats.{name}" for name in ALL_FORMATS}

#: The formats that render a :class:`~rmsnorm_eps.reports.checks.CheckReport`.
CHECK_FORMATS = ("markdown", "github", "junit", "sarif")


def render(result: object, fmt: str, options: RenderOptions | None = None) -> str:
    """Render ``result`` in format ``fmt`` (a key of :data:`FORMATS`): the joined
    :func:`render_chunks`.

    Raises :class:`UnsupportedResult` when the result's command does not support ``fmt``.
    """
    return "".join(render_chunks(result, fmt, options))


def render_chunks(result: object, fmt: str, options: RenderOptions | None = None) -> Iterator[str]:
    """Render ``result`` in format ``fmt`` as an iterator of chunks of whole lines (each chunk
    ends with a newline), so a report of any number of layers is written while it is made and
    never held whole.

    The command module (``reports/commands/<command>.py``) may stream a format itself:
    ``text_chunks(result, options)`` for text; its ``document`` may hold
    :class:`~rmsnorm_eps.reports.lazy.Lazy` lists (json); the check formats' modules stream
    a check report with ``render_checks_chunks(report)``. Without them the whole text is one
    chunk. Raises :class:`UnsupportedResult` now (not on the first chunk) when the result's
    command does not support ``fmt``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    options = options or RenderOptions()
    from rmsnorm_eps.reports.checks import CheckReport
    from rmsnorm_eps.reports.registry import command_module, command_of

    if isinstance(result, CheckReport):  # already format-neutral
        if fmt not in CHECK_FORMATS:
            raise UnsupportedResult(f"{fmt} format cannot render a check report")
        return _check_chunks(fmt, result)
    name = command_of(result)
    module = command_module(name)
    if fmt not in module.FORMATS:
        raise UnsupportedResult(f"{fmt} format is not available for {name}")
    own = getattr(module, f"render_{fmt}", None)
    if own is not None:
        return iter((own(result, options),))
    gate = options.gate
    if fmt == "text":
        chunks = getattr(module, "text_chunks", None)
        if chunks is not None:
            return iter(chunks(result, options))
        return iter((module.text(result, options),))
    if fmt == "json":
        from rmsnorm_eps.reports.formats.json import document_chunks

        return document_chunks(module.document(result, gate))
    return _check_chunks(fmt, module.checks(result, gate))


def _check_chunks(fmt: str, report: object) -> Iterator[str]:
    """A check format's chunks: its module's ``render_checks_chunks`` or ``render_checks``."""
    formatter = importlib.import_module(FORMATS[fmt])
    stream = getattr(formatter, "render_checks_chunks", None)
    if stream is not None:
        return iter(stream(report))
    return iter((formatter.render_checks(report),))

"""The reporter interface: one class per command, one abstract base per role.

A command's reporter (``reports/commands/<command>.py``) is a :class:`Reporter` made with the
presentation options of one rendering (colour, width, histogram, and the gate of a gating
command), and implements the roles it serves:

* :class:`TextRole` ``text(result) -> str``: the text report (format ``text``);
* :class:`DocumentRole` ``document(result) -> dict``: the canonical, versioned JSON document
  (format ``json``);
* :class:`ChecksRole` ``checks(result) -> CheckReport``: the format-neutral check report that
  the ``markdown``, ``github``, ``junit`` and ``sarif`` writers render;
* :class:`MarkdownRole` ``markdown(result) -> str``: its own Markdown instead of the check
  report's (``bound``'s ratio table).

The formats a command serves follow from its roles (:func:`formats_of`), so the CLI refuses a
format a command has no role for. Each role takes the result alone: what a rendering needs
besides it (the gate, colour, width) is ``self.options``, so no method carries a parameter it
ignores. :mod:`rmsnorm_eps.reports.registry` maps command names to reporter classes and
formats to writers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Generic, TypeVar

from rmsnorm_eps.reports.options import CHECK_FORMATS, Format, RenderOptions

if TYPE_CHECKING:
    from rmsnorm_eps.reports.checks import CheckReport

__all__ = [
    "ChecksRole",
    "DocumentRole",
    "MarkdownRole",
    "Reporter",
    "TextRole",
    "formats_of",
]

R = TypeVar("R", contravariant=True)


class Reporter:
    """A command's reporter for one rendering: the options it is made with are for every role
    it implements (``self.options.gate``: the gate of a gating command, else None)."""

    def __init__(self, options: RenderOptions | None = None) -> None:
        self.options = options or RenderOptions()


class TextRole(ABC, Generic[R]):
    """Serves ``--format text``."""

    @abstractmethod
    def text(self, result: R) -> str:
        """The text report: whole lines, fitted to ``options.width`` (None: never wrapped)."""


class DocumentRole(ABC, Generic[R]):
    """Serves ``--format json``."""

    @abstractmethod
    def document(self, result: R) -> dict[str, object]:
        """The canonical document: plain dicts and lists of unrounded numbers, fixed key order
        (the schema in ``rmsnorm_eps/data/<command>.schema.json``)."""


class ChecksRole(ABC, Generic[R]):
    """Serves the check formats: ``markdown``, ``github``, ``junit``, ``sarif``."""

    @abstractmethod
    def checks(self, result: R) -> CheckReport:
        """The format-neutral check report (raise
        :class:`~rmsnorm_eps.reports.options.UnsupportedResult` for a result that has none)."""


class MarkdownRole(ABC, Generic[R]):
    """Writes its own ``--format markdown`` (a result that is a table, not checks)."""

    @abstractmethod
    def markdown(self, result: R) -> str:
        """The Markdown text."""


def formats_of(reporter: type[Reporter]) -> frozenset[Format]:
    """The formats a reporter class serves, from the roles it implements."""
    formats: set[Format] = set()
    if issubclass(reporter, TextRole):
        formats.add(Format.TEXT)
    if issubclass(reporter, DocumentRole):
        formats.add(Format.JSON)
    if issubclass(reporter, MarkdownRole):
        formats.add(Format.MARKDOWN)
    if issubclass(reporter, ChecksRole):
        formats |= CHECK_FORMATS
    return frozenset(formats)

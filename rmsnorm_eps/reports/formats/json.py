"""JSON format: a document (see :mod:`rmsnorm_eps.reports.document`), indented, keys in the
order the document gives them, floats with repr (the shortest round trip)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

from rmsnorm_eps.chunks import line_chunks
from rmsnorm_eps.escape import json_text
from rmsnorm_eps.reports.lazy import Lazy

__all__ = ["document_chunks", "render_document"]


def render_document(doc: dict[str, Any]) -> str:
    """Serialize ``doc`` (NaN and inf are refused: documents write them as strings), ASCII
    only, with no CI workflow command in any line (:func:`rmsnorm_eps.escape.json_text`).

    The same text as ``json.dumps(doc, indent=2, allow_nan=False)`` (with every
    :class:`~rmsnorm_eps.reports.lazy.Lazy` written as the list of its items): the joined
    :func:`document_chunks`."""
    return "".join(document_chunks(doc))


class _LazyFound(Exception):
    """Raised by :func:`_refuse_lazy` out of ``json.dumps``: the value holds a Lazy list."""


def _refuse_lazy(value: Any) -> Any:
    """``json.dumps``'s ``default``: a :class:`Lazy` stops the plain serialization (the value
    is then written part by part); anything else is refused as ``json.dumps`` refuses it."""
    if isinstance(value, Lazy):
        raise _LazyFound
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _pieces(value: Any, level: int) -> Iterator[str]:
    """The text of ``value`` at nesting ``level``, exactly as ``json.dumps(doc, indent=2)``
    writes it there; a :class:`Lazy` list is written one item at a time.

    A value without a Lazy list is one ``json.dumps`` (tried first: a Lazy list in it stops
    that try, and the value is written part by part instead; at most one failed try per
    nesting level on the way to a Lazy list, so no walk of every value looks for them)."""
    pad = "  " * level
    if not isinstance(value, Lazy):
        try:
            text = json.dumps(value, indent=2, allow_nan=False, default=_refuse_lazy)
        except _LazyFound:
            pass
        else:
            yield text.replace("\n", "\n" + pad) if level else text
            return
    if isinstance(value, dict):
        if not value:
            yield "{}"
            return
        yield "{"
        sep = "\n"
        for key, item in value.items():
            yield f"{sep}{pad}  {json.dumps(str(key))}: "
            yield from _pieces(item, level + 1)
            sep = ",\n"
        yield f"\n{pad}}}"
        return
    items: Iterable[Any] = value
    opened = False
    for item in items:
        yield ",\n" if opened else "[\n"
        opened = True
        yield pad + "  "
        yield from _pieces(item, level + 1)
    yield f"\n{pad}]" if opened else "[]"


def document_chunks(doc: dict[str, Any]) -> Iterator[str]:
    """:func:`render_document` as chunks of whole lines (each ends with a newline), so a
    document with :class:`~rmsnorm_eps.reports.lazy.Lazy` lists of any length is written in
    bounded memory. The chunks joined are exactly :func:`render_document`'s text."""
    for chunk in line_chunks(chain(_pieces(doc, 0), ("\n",))):
        yield json_text(chunk)
